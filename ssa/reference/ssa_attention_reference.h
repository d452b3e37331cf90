// Naive SSA attention (docs/ssa.md) in f64, materialising every score: the
// reference the tiled CPU and CUDA kernels are tested against. Full operator, the key-block
// variant for ring attention, the merge of block results, and the backward of both. Arguments as
// in ssa/ssa_attention_args.h; every tensor is an f64 host tensor (cast low-precision inputs
// first: the f64 copies are exact).
#pragma once

#include "ssa/ssa_attention_args.h"
#include "ssa/ssa_options.h"

namespace kelvin::ssa::reference {

// Full operator over B rows of T tokens (shape = SsaBlockShape::Full(B, T); key_positions
// undefined or equal to query_positions) -> every field of `outputs` written.
void SsaAttentionForward(const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs);

// Backward of the full operator from dout [N, H, d]: du, dk, dv (and the source gradients without
// weight sharing) written; grads.params accumulated. Recomputes the forward.
void SsaAttentionBackward(const SsaOptions& options, const SsaBlockShape& shape, const Tensor& dout,
                          const SsaAttentionInputs& inputs, const SsaParameters& params,
                          SsaAttentionGrads& grads);

// One key block: the queries of [query_begin, query_begin + Tq) against the keys of
// [key_begin, key_begin + Tk) of every row, masked in global indices -> outputs written: the
// block-local partial output and lse (see SsaAttentionOutputs), tau^q [Nq, H], tau^v [Nk, G].
void SsaAttentionBlockForward(const SsaOptions& options, const SsaBlockShape& shape,
                              const SsaAttentionInputs& inputs, const SsaParameters& params,
                              SsaAttentionOutputs& outputs);

// out [Nq, H, d], lse [Nq, H]: the running merge, started at out = 0 and lse = -inf (or at the
// first block's results). Adds one block: lse' = log(e^lse + e^block_lse),
// out' = e^(lse - lse') out + e^(block_lse - lse') block_out. After every block, out and lse are
// the full operator's.
void MergeAttentionBlock(Tensor& out, Tensor& lse, const Tensor& block_out,
                         const Tensor& block_lse);

// Backward of one key block, given dout [Nq, H, d] and the MERGED out and lse of these queries
// (probabilities are exp(S - lse) over all keys, FlashAttention-2 style): every gradient of
// `grads` accumulates (+=) this block's contribution (du and the query-side temperature terms
// from these keys, dk, dv and the value-side terms of these keys from these queries). Summed over
// all key blocks (and query chunks) it is the full operator's gradient.
void SsaAttentionBlockBackward(const SsaOptions& options, const SsaBlockShape& shape,
                               const Tensor& dout, const Tensor& out, const Tensor& lse,
                               const SsaAttentionInputs& inputs, const SsaParameters& params,
                               SsaAttentionGrads& grads);

}  // namespace kelvin::ssa::reference
