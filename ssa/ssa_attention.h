// The SSA attention operator (docs/ssa.md): checks its arguments and dispatches to the
// tiled CPU kernel (f32, f64) or CUDA (bf16: the RoPE/temperature pass, then Kelvin's fused
// attention kernel or the cuDNN core, then the adjoint pass), forward, backward and the merge of
// key blocks. Arguments, shapes and masking rule: ssa/ssa_attention_args.h.
#pragma once

#include <string>

#include "core/context.h"
#include "ssa/attention_backend.h"
#include "ssa/ssa_attention_args.h"
#include "ssa/ssa_options.h"

namespace kelvin::ssa {

// How the CUDA operator runs its attention core (the CPU operator ignores it). AUTO times both
// cores once per shape (batch, token ranges, heads, head dim, packed or not) at its first call and
// keeps the faster; a call the cuDNN core cannot run (ssa/attention_segments.h, or no plan from
// cuDNN) runs the own kernel, said once in the log.
struct AttentionCoreOptions {
  AttentionBackend backend = AttentionBackend::kFused;
  // Host copies of inputs.query_positions [Nq] and inputs.key_positions [Nk] (i32), from which the
  // cuDNN core lays out the documents; undefined: it copies the device's (waiting for the stream).
  // host_key_positions is undefined where inputs.key_positions is.
  Tensor host_query_positions, host_key_positions;
  // When set, receives the core that ran the call (tests and benchmarks ask).
  AttentionCore* core_run = nullptr;
};

// Empty when the cuDNN core can run on ctx's device, else why not (not built: KELVIN_CUDNN; the
// library, its version or the device).
std::string CudnnCoreUnavailableReason(const Context& ctx);

// Dtypes: u, k, v, the sources, the parameters, out, du, dk, dv and the source gradients share one
// dtype (f32/f64 on the CPU, bf16 on CUDA); lse, the temperatures and the parameter gradients are
// in AccumDType of it. One call pairs the query tokens of `shape` with its key tokens:
// SsaBlockShape::Full for the whole operator, or a query block against a key block (global
// indices); context parallelism runs each local query chunk against the all-gathered keys.
// With options.query_temperature and options.value_temperature both false the operator is plain
// causal GQA attention with RoPE (vanilla Llama): no temperature is computed, the parameters may
// be undefined, and multiplying by a temperature of exactly 1 is skipped (so an SSA model whose
// temperatures are exactly 1 and vanilla attention give bit-identical outputs either way).

// Forward -> every field of `outputs` written: out (normalised over the call's keys), lse, and
// tau^q [Nq, H], tau^v [Nk, G] (left undefined-or-untouched when that temperature is off).
// Parameters a temperature that is off does not read may be undefined.
void SsaAttentionForward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs, const AttentionCoreOptions& core = {});

// The key side as SsaAttentionForward with inputs.keys_prepared reads it, for N tokens appended
// to a cache: k~ [N, G, d] = RoPE(k) at `positions` [N] i32, v~ [N, G, d] = tau^v v, and tau_v
// [N, G] (AccumDType) from v with weight sharing, else from value_source [N, G, d]; RoPE's cos and
// sin times rope_attention_factor (SsaAttentionInputs::rope_attention_factor). With the value
// temperature off, v~ = v and tau_v is not written (it may be undefined); value_source and
// value_readout are read only when it is on. k~ may be k and v~ may be v (in place). The same
// values, bit for bit, as the operator computes for those keys itself.
void PrepareKeysAndValues(const Context& ctx, const SsaOptions& options, const Tensor& k,
                          const Tensor& v, const Tensor& value_source, const Tensor& positions,
                          const Tensor& inv_freq, const Tensor& value_readout, Tensor& k_prepared,
                          Tensor& v_prepared, Tensor& tau_v, double rope_attention_factor = 1.0);

// Backward from dout [Nq, H, d], given the forward's saved outputs (`saved.out` and `saved.lse`
// are the MERGED results over all key blocks when the keys were split, FlashAttention-2 style;
// `saved.query_temperature` / `saved.value_temperature` are this call's). Every gradient
// ACCUMULATES (+=): du (with weight sharing also the temperature path into u), dk, dv (likewise
// into v), the source gradients without weight sharing, and grads.params (a^q, a^v, alpha). Summed
// over all key blocks it is the full operator's gradient; zero the gradients before the first call.
void SsaAttentionBackward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                          const Tensor& dout, const SsaAttentionInputs& inputs,
                          const SsaParameters& params, const SsaAttentionOutputs& saved,
                          SsaAttentionGrads& grads, const AttentionCoreOptions& core = {});

// Whether the CUDA kernels run heads of `head_dim` (64 and 128; another is a programmer error
// there, so a caller choosing the device checks it first).
bool CudaSupportsHeadDim(int64_t head_dim);

// Aborts, naming `name`, unless the host position ids [batch * count] of one side (each row's
// chunk of `count` tokens starting at global index `begin`) restart at 0 or count up by one, the
// first one <= begin (a document cannot start before the row).
void CheckPositionIds(const Tensor& positions, int64_t batch, int64_t begin, int64_t count,
                      const std::string& name);

namespace cpu {
void SsaAttentionForward(const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs);
void SsaAttentionBackward(const SsaOptions& options, const SsaBlockShape& shape, const Tensor& dout,
                          const SsaAttentionInputs& inputs, const SsaParameters& params,
                          const SsaAttentionOutputs& saved, SsaAttentionGrads& grads);
void PrepareKeysAndValues(const SsaOptions& options, const Tensor& k, const Tensor& v,
                          const Tensor& value_source, const Tensor& positions,
                          const Tensor& inv_freq, const Tensor& value_readout, Tensor& k_prepared,
                          Tensor& v_prepared, Tensor& tau_v, double rope_attention_factor = 1.0);
}  // namespace cpu

namespace cuda {
void SsaAttentionForward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs, const AttentionCoreOptions& core);
void SsaAttentionBackward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                          const Tensor& dout, const SsaAttentionInputs& inputs,
                          const SsaParameters& params, const SsaAttentionOutputs& saved,
                          SsaAttentionGrads& grads, const AttentionCoreOptions& core);
void PrepareKeysAndValues(const Context& ctx, const SsaOptions& options, const Tensor& k,
                          const Tensor& v, const Tensor& value_source, const Tensor& positions,
                          const Tensor& inv_freq, const Tensor& value_readout, Tensor& k_prepared,
                          Tensor& v_prepared, Tensor& tau_v, double rope_attention_factor = 1.0);
}  // namespace cuda

}  // namespace kelvin::ssa
