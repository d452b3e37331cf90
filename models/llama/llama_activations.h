// What one decoder layer keeps from its forward for its backward, what recompute drops, and the
// one table of those fields (shape, dtype, which recompute drops it, when SSA or context
// parallelism needs it) that the model's allocation, its recompute buffers, its byte counts and
// the memory plan all read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ssa/ssa_options.h"

namespace kelvin::models {

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
};

struct LlamaActivationField {
  Tensor LlamaLayerActivations::*member;
  std::vector<ActivationDim> dims;
  bool statistics;  // in the statistics dtype (AccumDType), else the activation dtype
  RecomputedBy recomputed_by;
  ActivationNeed need;
};

// Every field of LlamaLayerActivations, in its declaration order.
const std::vector<LlamaActivationField>& LlamaActivationFields();

// Whether `field` exists under the attention options and context parallelism.
bool ActivationNeeded(const LlamaActivationField& field, const ssa::SsaOptions& attention,
                      bool context_parallel);

// Whether `recompute` drops `field` from the slots (it then lives once, in the recompute buffers).
bool Recomputed(const LlamaActivationField& field, const LlamaRecompute& recompute);

// The element count of `field`.
template <typename Size>
Size ActivationElements(const LlamaActivationField& field, const ActivationSizes<Size>& sizes) {
  Size elements = sizes.Of(field.dims.front());
  for (size_t i = 1; i < field.dims.size(); ++i) elements = elements * sizes.Of(field.dims[i]);
  return elements;
}

}  // namespace kelvin::models
