// LlamaLayerWeights and LlamaEndWeights: a decoder layer's parameters, and those around the
// layers, as members found once by their Hugging Face names, so that the training forward and
// backward and the KV-cache decoder read members instead of looking a name up per GEMM. Views of
// the ParameterSet's flat buffers (values or gradients).
#pragma once

#include <array>
#include <cstdint>

#include "core/optim/parameter_set.h"
#include "core/tensor.h"
#include "models/llama/llama_peft.h"
#include "ssa/ssa_attention_args.h"

namespace kelvin::models {

// One projection's LoRA matrices (ops::LoraForward's a and b); undefined where not targeted.
struct LoraAdapter {
  Tensor a;  // [r, in] (row-parallel base: this rank's input slice)
  Tensor b;  // [out, r] (column-parallel base: this rank's output slice)
};

struct LlamaLayerWeights {
  Tensor input_norm, q, k, v, o, post_norm, gate, up, down;  // [out, in] as Hugging Face's
  Tensor query_projection, value_projection;  // SSA's W_tmp without weight sharing, else undefined
  ssa::SsaParameters ssa;                     // a^q, a^v, alpha; undefined without SSA
  std::array<LoraAdapter, kNumLoraTargets> lora;  // by LoraTarget; undefined without model.lora
};

// Layer `layer`'s values in `params` (with `gradients`, their gradients); the SSA and LoRA members
// stay undefined where `params` has no such parameter (and gradients where it is frozen). Aborts
// when a Llama weight is missing.
LlamaLayerWeights LayerWeightsOf(const ParameterSet& params, int64_t layer, bool gradients);

// Undefined on the pipeline stages that do not hold them.
struct LlamaEndWeights {
  Tensor embedding;   // [V_local, D] on the first stage (and the last with tied embeddings)
  Tensor final_norm;  // [D] on the last stage
  Tensor lm_head;     // [V_local, D] on the last stage: the embedding with tied embeddings
};

// As LayerWeightsOf; `tied`: LlamaConfig::tie_word_embeddings.
LlamaEndWeights EndWeightsOf(const ParameterSet& params, bool tied, bool gradients);

}  // namespace kelvin::models
