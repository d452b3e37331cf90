// What one decoder layer keeps from its forward for its backward, what recompute drops, the
// scratch every layer shares, and the two tables of those fields (shape, dtype, which recompute
// drops it, when SSA or the layout needs it) that the model's allocation, its recompute buffers,
// its byte counts and the memory plan all read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ssa/ssa_options.h"

namespace kelvin::models {

// LoRA dropout in one layer's forward (LlamaModel::SetLoraDropout): the mask of element (n, f) of
// the adapter of projection t hashes token_keys[n], the site (layer, t) and f's index in the full
// input (ops::HashedDropout), so every layout draws the same one.
struct LlamaLoraDropout {
  Tensor token_keys;  // [N] i64 ops::DropoutTokenKey of this rank's tokens; undefined: no dropout
  double p = 0;       // the probability of dropping an element
  int64_t layer = 0;  // the layer's index in the model
  int tp_rank = 0;    // a row-parallel projection's input is the tp_rank-th slice of its features
};

// N this rank's tokens, Nl those of its norm regions (N / TP with sequence parallelism), Nk the
// tokens attention sees (N x CP); H, G, F this rank's heads, KV heads and MLP columns.
struct LlamaLayerActivations {
  Tensor x;          // [Nl, D] layer input (residual stream)
  Tensor h_attn;     // [N, D] RMSNorm(x) (all-gathered with sequence parallelism)
  Tensor rstd_attn;  // [Nl]
  Tensor u, k, v;    // [N, H, d], [N, G, d], [N, G, d] before RoPE (the operator applies it)
  Tensor attn;       // [N, H, d] attention output
  Tensor lse;        // [N, H] attention log-sum-exp
  Tensor tau_q;      // [N, H] SSA query temperature (undefined when off)
  Tensor tau_v;      // [Nk, G] SSA value temperature (undefined when off)
  // Without weight sharing: W_tmp x, what the temperatures read (undefined otherwise).
  Tensor query_source;  // [N, H, d]
  Tensor value_source;  // [N, G, d]
  // Context parallelism only (undefined otherwise): the whole sequence's k, v and value source.
  Tensor k_all, v_all, value_source_all;  // [Nk, G, d]
  Tensor x_mid;                           // [Nl, D] x + attention projection
  Tensor h_mlp;     // [N, D] RMSNorm(x_mid) (all-gathered with sequence parallelism)
  Tensor rstd_mlp;  // [Nl]
  Tensor gate, up;  // [N, F]
  Tensor act;       // [N, F] SiLU(gate) * up
  // Not a buffer: where the LoRA adapters' dropout masks come from in this forward (and its
  // recompute and backward), unset (no dropout) in evaluation and decoding.
  LlamaLoraDropout lora_dropout;
};

// The buffers every layer and micro-batch share, sized for the current micro-batch shape: the
// forward's partial sums and region buffers and the backward's gradients. All in the activation
// dtype.
struct LlamaScratch {
  Tensor proj;           // [N, D] row-parallel GEMM outputs (partial sums), the embedding's too
  Tensor local_tokens;   // [Nl, D] sequence parallel: a norm's local output / a reduced projection
  Tensor gathered_grad;  // [N, D] sequence parallel: an all-gathered gradient
  Tensor d_proj;         // [Nl, D] sequence parallel: a norm's input gradient (else it is proj)
  Tensor dh;             // [N, D]
  Tensor du, dattn;      // [N, H, d]
  Tensor dk, dv;         // [Nk, G, d]
  Tensor dquery_source;  // [N, H, d] without weight sharing
  Tensor dvalue_source;  // [Nk, G, d] without weight sharing
  // Context parallelism: this rank's share of dk, dv, dvalue_source [N, G, d], and the sequence
  // collectives' reordering buffer [Nk * G * d].
  Tensor dk_local, dv_local, dvalue_source_local, cp_reorder;
  Tensor dgate, dup, dact;  // [N, F]
};

// The sizes a field's shape is made of.
enum class ActivationDim {
  kLocalTokens,  // Nl
  kTokens,       // N
  kKeyTokens,    // Nk
  kModel,        // D
  kHeads,        // H
  kKvHeads,      // G
  kHeadDim,      // d
  kFfn           // F
};

// Their values for one micro-batch on one rank, in any integer-like type (the memory plan's
// saturates).
template <typename Size>
struct ActivationSizes {
  Size local_tokens, tokens, key_tokens, model, heads, kv_heads, head_dim, ffn;

  Size Of(ActivationDim dim) const {
    switch (dim) {
      case ActivationDim::kLocalTokens:
        return local_tokens;
      case ActivationDim::kTokens:
        return tokens;
      case ActivationDim::kKeyTokens:
        return key_tokens;
      case ActivationDim::kModel:
        return model;
      case ActivationDim::kHeads:
        return heads;
      case ActivationDim::kKvHeads:
        return kv_heads;
      case ActivationDim::kHeadDim:
        return head_dim;
      case ActivationDim::kFfn:
        return ffn;
    }
    return ffn;
  }
};

// Activations recomputed in backward instead of kept per micro-batch (model.recompute_attention,
// model.recompute_mlp): the attention's projections, outputs, log-sum-exp and temperatures (kept:
// the normed input h_attn), and the MLP's gate, up and SwiGLU output (kept: h_mlp). Recompute runs
// the same deterministic forward again, so gradients are bit-identical to keeping them; it costs
// the QKV projections and the attention forward, or the gate/up GEMMs and SwiGLU, once more.
struct LlamaRecompute {
  bool attention = false;
  bool mlp = false;
};

// Which forward recomputes a field in the backward when LlamaRecompute asks (kKept: never).
enum class RecomputedBy { kKept, kAttention, kMlp };

// When a field exists at all.
enum class ActivationNeed {
  kAlways,
  kQueryTemperature,    // tau^q
  kValueTemperature,    // tau^v
  kQuerySource,         // W_tmp x for tau^q without weight sharing
  kValueSource,         // W_tmp x for tau^v without weight sharing
  kContextParallel,     // the gathered keys and values
  kContextValueSource,  // the gathered value source
  kSequenceParallel,    // the norm regions' split buffers
};

// How the layout splits the tokens, which decides the fields that exist.
struct TokenSplits {
  bool context_parallel = false;   // rows over the CP ranks
  bool sequence_parallel = false;  // norm regions over the TP ranks
};

// One row of a table of `Owner`'s tensors.
template <typename Owner>
struct ActivationField {
  Tensor Owner::*member;
  std::vector<ActivationDim> dims;
  bool statistics = false;  // in the statistics dtype (AccumDType), else the activation dtype
  RecomputedBy recomputed_by = RecomputedBy::kKept;
  ActivationNeed need = ActivationNeed::kAlways;
  bool flat = false;  // allocated 1-d, of the shape's element count
};
using LlamaActivationField = ActivationField<LlamaLayerActivations>;
using LlamaScratchField = ActivationField<LlamaScratch>;

// Every field of LlamaLayerActivations, in its declaration order.
const std::vector<LlamaActivationField>& LlamaActivationFields();
// Every field of LlamaScratch, in its declaration order.
const std::vector<LlamaScratchField>& LlamaScratchFields();

// Whether a field needed `need` exists under the attention options and the token splits.
bool ActivationNeeded(ActivationNeed need, const ssa::SsaOptions& attention,
                      const TokenSplits& splits);

// Whether `recompute` drops `field` from the slots (it then lives once, in the recompute buffers).
bool Recomputed(const LlamaActivationField& field, const LlamaRecompute& recompute);

// The element count of `field`.
template <typename Owner, typename Size>
Size ActivationElements(const ActivationField<Owner>& field, const ActivationSizes<Size>& sizes) {
  Size elements = sizes.Of(field.dims.front());
  for (size_t i = 1; i < field.dims.size(); ++i) elements = elements * sizes.Of(field.dims[i]);
  return elements;
}

}  // namespace kelvin::models
