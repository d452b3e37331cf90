// W + s B A for every adapted projection, by name.
#include "models/llama/lora_merge.h"

#include <map>

#include "core/check.h"
#include "core/ops/gemm.h"
#include "models/llama/llama_peft.h"
#include "models/llama/llama_pipeline_stage.h"

namespace kelvin::models {

void MergeLoraAdapters(const LlamaConfig& config,
                       std::vector<std::pair<std::string, Tensor>>& tensors) {
  if (!config.lora.has_value()) return;
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  const float scale = static_cast<float>(config.lora->Scale());
  const auto find = [&by_name](const std::string& name) -> Tensor& {
    auto it = by_name.find(name);
    KELVIN_CHECK(it != by_name.end()) << "the export is missing tensor " << name;
    return it->second;
  };
  for (int64_t l = 0; l < config.num_layers; ++l) {
    for (const LoraTarget target : config.lora->targets) {
      const std::string module = LayerParameterName(l, LoraTargetModule(target));
      const Tensor& a = find(module + ".lora_A.weight");  // [r, in]
      const Tensor& b = find(module + ".lora_B.weight");  // [out, r]
      Tensor& w = find(module + ".weight");               // [out, in]
      KELVIN_CHECK(w.dtype() == DType::kF32 && a.dtype() == DType::kF32 && b.dtype() == DType::kF32)
          << "LoRA merges in f32: " << module;
      ops::Gemm(Context::Cpu(), b, false, a, false, w, scale, 1.0f);  // W += s B A
    }
  }
  std::erase_if(tensors, [](const auto& named) { return IsLoraParameter(named.first); });
}

LlamaConfig MergedConfig(const LlamaConfig& config) {
  LlamaConfig merged = config;
  merged.lora.reset();
  merged.trainable.reset();
  return merged;
}

}  // namespace kelvin::models
