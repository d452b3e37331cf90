// The layers' parameters and those around them by their Hugging Face names, once.
#include "models/llama/llama_layer_weights.h"

#include <string>
#include <string_view>

#include "models/llama/llama_pipeline_stage.h"

namespace kelvin::models {

LlamaLayerWeights LayerWeightsOf(const ParameterSet& params, int64_t layer, bool gradients) {
  const auto of = [&](const ParameterSet::Entry& e) { return gradients ? e.grad : e.value; };
  const auto required = [&](std::string_view suffix) {
    return of(params.Get(LayerParameterName(layer, suffix)));
  };
  const auto optional = [&](std::string_view suffix) {
    const std::string name = LayerParameterName(layer, suffix);
    return params.Contains(name) ? of(params.Get(name)) : Tensor();
  };
  std::array<LoraAdapter, kNumLoraTargets> lora;
  for (int t = 0; t < kNumLoraTargets; ++t) {
    const std::string module = LoraTargetModule(static_cast<LoraTarget>(t));
    lora[t] = {optional(module + ".lora_A.weight"), optional(module + ".lora_B.weight")};
  }
  return {required("input_layernorm.weight"),
          required("self_attn.q_proj.weight"),
          required("self_attn.k_proj.weight"),
          required("self_attn.v_proj.weight"),
          required("self_attn.o_proj.weight"),
          required("post_attention_layernorm.weight"),
          required("mlp.gate_proj.weight"),
          required("mlp.up_proj.weight"),
          required("mlp.down_proj.weight"),
          optional("self_attn.ssa.query_temperature_proj.weight"),
          optional("self_attn.ssa.value_temperature_proj.weight"),
          {optional("self_attn.ssa.query_readout"), optional("self_attn.ssa.value_readout"),
           optional("self_attn.ssa.alpha")},
          lora};
}

LlamaEndWeights EndWeightsOf(const ParameterSet& params, bool tied, bool gradients) {
  const auto held = [&](const char* name) {
    if (!params.Contains(name)) return Tensor();
    const ParameterSet::Entry& e = params.Get(name);
    return gradients ? e.grad : e.value;
  };
  return {held(kEmbeddingName), held(kFinalNormName), held(tied ? kEmbeddingName : kLmHeadName)};
}

}  // namespace kelvin::models
