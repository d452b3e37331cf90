// adapter_config.json, the adapter's tensors under peft's names, a model card with the loading
// code, and with SSA the model's config and modeling code.
#include "models/llama/peft_adapter_directory.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/build_info.h"
#include "core/check.h"
#include "core/io/hf_checkpoint.h"
#include "models/llama/hf_modeling_code.h"
#include "models/llama/llama_peft.h"
#include "models/llama/llama_pipeline_stage.h"
#include "models/llama/lora_merge.h"

namespace kelvin::models {
namespace {

// The sets whose parameters the adapter carries: the adapters, SSA whenever it is on, and the
// norms and embeddings when they train.
TrainableSets CarriedSets(const LlamaConfig& config) {
  TrainableSets carried = config.trainable.value_or(TrainableSets{});
  carried.adapters = true;
  carried.ssa = config.ssa.has_value();
  return carried;
}

std::string AdapterConfigJson(const LlamaConfig& config, const HfExportProvenance& provenance) {
  const LoraOptions& lora = *config.lora;
  nlohmann::json targets = nlohmann::json::array();
  for (const LoraTarget target : lora.targets) targets.push_back(LoraTargetName(target));
  const std::vector<std::string> modules = PeftModulesToSave(config);
  const nlohmann::json root = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", provenance.source_dir.empty()
                                      ? nlohmann::json(nullptr)
                                      : nlohmann::json(provenance.source_dir)},
      {"r", lora.rank},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},  // peft's training-time dropout, as the job trained
      {"use_rslora", lora.rslora},
      {"target_modules", targets},
      {"modules_to_save", modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(modules)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true}};
  return root.dump(2) + "\n";
}

std::string AdapterCard(const LlamaConfig& config, const HfExportProvenance& p) {
  const bool ssa = config.ssa.has_value();
  std::string card = absl::StrCat(
      "---\nlibrary_name: peft\ntags:\n- kelvin\n- lora\n", ssa ? "- ssa\n" : "", "---\n\n# ",
      p.job_name.empty() ? "A Kelvin LoRA adapter" : p.job_name, "\n\nWritten by Kelvin ",
      KelvinVersion(), ": LoRA of rank ", config.lora->rank, " over ",
      p.source.empty() ? "its base model" : p.source, ", ", p.steps, " steps.\n\n## Loading\n\n");
  if (!ssa) {
    absl::StrAppend(&card,
                    "```python\nfrom peft import PeftModel\nfrom transformers import "
                    "AutoModelForCausalLM\nbase = AutoModelForCausalLM.from_pretrained(BASE)\n"
                    "model = PeftModel.from_pretrained(base, ADAPTER)\n```\n");
    return card;
  }
  absl::StrAppend(
      &card,
      "The model has Selective Self-Attention, whose code and config ship here: load the base "
      "through them, then the adapter (which carries every SSA tensor):\n\n```python\n"
      "from peft import PeftModel\nfrom transformers import AutoConfig\n"
      "from transformers.dynamic_module_utils import get_class_from_dynamic_module\n"
      "config = AutoConfig.from_pretrained(ADAPTER, trust_remote_code=True)\n"
      "SsaLlama = get_class_from_dynamic_module(\"modeling_ssa_llama.SsaLlamaForCausalLM\", "
      "ADAPTER)\nbase = SsaLlama.from_pretrained(BASE, config=config)\n"
      "model = PeftModel.from_pretrained(base, ADAPTER)\n```\n");
  return card;
}

}  // namespace

std::vector<std::string> PeftModulesToSave(const LlamaConfig& config) {
  const TrainableSets carried = CarriedSets(config);
  std::vector<std::string> modules;
  if (carried.ssa) modules.push_back("ssa");
  if (carried.norms)
    modules.insert(modules.end(), {"input_layernorm", "post_attention_layernorm", "norm"});
  if (carried.embeddings) modules.insert(modules.end(), {"embed_tokens", "lm_head"});
  return modules;
}

bool IsInPeftAdapter(const LlamaConfig& config, std::string_view name) {
  return IsTrainable(CarriedSets(config), name);
}

std::vector<std::pair<std::string, Tensor>> PeftAdapterTensors(
    const LlamaConfig& config, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  KELVIN_CHECK(config.lora.has_value()) << "a peft adapter needs LoRA adapters";
  const bool embeddings = CarriedSets(config).embeddings;
  std::vector<std::pair<std::string, Tensor>> adapter;
  for (const auto& [name, tensor] : tensors) {
    if (!IsInPeftAdapter(config, name)) continue;
    adapter.emplace_back(absl::StrCat(kPeftTensorPrefix, name), tensor);
    // A tied output layer is the embedding: peft saves the lm_head module apart.
    if (name == kEmbeddingName && embeddings && config.tie_word_embeddings) {
      adapter.emplace_back(absl::StrCat(kPeftTensorPrefix, kLmHeadName), tensor);
    }
  }
  return adapter;
}

absl::Status WritePeftAdapterDirectory(const std::string& directory, const LlamaConfig& config,
                                       const std::vector<std::pair<std::string, Tensor>>& adapter,
                                       const HfExportProvenance& provenance) {
  const DType dtype = adapter.empty() ? DType::kF32 : adapter.front().second.dtype();
  std::vector<std::pair<std::string, std::string>> files = {
      {std::string(kPeftAdapterConfigName), AdapterConfigJson(config, provenance)},
      {"README.md", AdapterCard(config, provenance)}};
  if (config.ssa.has_value()) {
    files.emplace_back("config.json", LlamaConfigToHfJson(MergedConfig(config), dtype));
    for (auto& file : SsaHfModelingFiles()) files.push_back(std::move(file));
  }
  return io::WriteSingleFileCheckpoint(directory, kPeftAdapterWeightsName,
                                       io::HfTensorSourcesOf(adapter), files);
}

}  // namespace kelvin::models
