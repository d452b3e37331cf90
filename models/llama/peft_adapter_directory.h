// The peft adapter directory Kelvin writes for a LoRA job (training.export_format=PEFT_ADAPTER,
// kelvin convert --format peft_adapter): adapter_config.json and adapter_model.safetensors, which
// peft.PeftModel.from_pretrained(base, directory) loads over the base model; with SSA also the SSA
// model's config.json and modeling code that the base is loaded through (docs/formats.md, "PEFT
// adapter directory").
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/llama/hf_model_directory.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// peft's prefix of every tensor name in adapter_model.safetensors (the PeftModel's own, then the
// transformers model's "model." or "lm_head").
inline constexpr char kPeftTensorPrefix[] = "base_model.model.";
inline constexpr char kPeftAdapterConfigName[] = "adapter_config.json";
inline constexpr char kPeftAdapterWeightsName[] = "adapter_model.safetensors";

// The submodules peft saves whole beside the adapters (adapter_config.json's modules_to_save):
// "ssa" (every SSA parameter, trained or not, so the adapter does not depend on how the modeling
// code initialises a base without them), "input_layernorm", "post_attention_layernorm" and "norm"
// when model.peft trains the norms, "embed_tokens" and "lm_head" when it trains the embeddings.
std::vector<std::string> PeftModulesToSave(const LlamaConfig& config);

// Whether the parameter `name` of `config` (which has LoRA) is in its adapter: a LoRA matrix or
// a parameter of PeftModulesToSave.
bool IsInPeftAdapter(const LlamaConfig& config, std::string_view name);

// The adapter's tensors of `config` (which has LoRA) from the whole model's parameters (full
// shapes, Hugging Face names): the LoRA matrices and the parameters of PeftModulesToSave, under
// kPeftTensorPrefix (a tied output layer saved as lm_head too when the embeddings train).
std::vector<std::pair<std::string, Tensor>> PeftAdapterTensors(
    const LlamaConfig& config, const std::vector<std::pair<std::string, Tensor>>& tensors);

// Writes the adapter directory of `config` with `adapter` (PeftAdapterTensors, all f32 or all
// bf16), all or nothing as io::WriteSingleFileCheckpoint writes. adapter_config.json's
// base_model_name_or_path is provenance.source_dir (model.hf_dir as the job gives it), null for a
// preset.
absl::Status WritePeftAdapterDirectory(const std::string& directory, const LlamaConfig& config,
                                       const std::vector<std::pair<std::string, Tensor>>& adapter,
                                       const HfExportProvenance& provenance);

}  // namespace kelvin::models
