// What one decoder layer keeps from its forward for its backward, and the one table of those
// fields (shape, dtype, whether recompute drops it, when SSA or context parallelism needs it) that
// the model's allocation, its recompute buffers, its byte counts and the memory plan all read.
#pragma once

#include <array>
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
  kLocalTokens,
  kTokens,
  kKeyTokens,
  kModel,
  kHeads,
  kKvHeads,
  kHeadDim,
  kFfn
};
inline constexpr int kNumActivationDims = 8;

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

// The element count of `field` from the sizes by ActivationDim (any integer-like type: the memory
// plan saturates).
template <typename Size>
Size ActivationElements(const LlamaActivationField& field,
                        const std::array<Size, kNumActivationDims>& sizes) {
  Size elements = sizes[static_cast<int>(field.dims.front())];
  for (size_t i = 1; i < field.dims.size(); ++i) {
    elements = elements * sizes[static_cast<int>(field.dims[i])];
  }
  return elements;
}

}  // namespace kelvin::models
