// What Kelvin writes when it exports a model (training.export_hf_dir, kelvin convert): the merged
// Hugging Face directory (hf_model_directory.h, LoRA merged in: lora_merge.h) or, for a LoRA job,
// the peft adapter directory (peft_adapter_directory.h); and the rule for a directory that already
// holds the other format.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/llama/hf_model_directory.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

enum class ExportFormat {
  kMerged,       // the whole model, each adapter merged into its projection
  kPeftAdapter,  // the LoRA adapters (and modules_to_save) for peft
};

struct ExportOptions {
  ExportFormat format = ExportFormat::kMerged;
  DType dtype = DType::kF32;  // of the written weights: f32 or bf16
};

// An export of `format` into `directory` must not land beside the other format's files:
// transformers loads a directory holding adapter_config.json as that adapter over its base, and
// model weights beside an adapter make it a model directory too. An error saying so, `label`
// naming the field or flag ("training.export_hf_dir=\"DIR\"", "--out DIR"); OK for a directory
// that does not exist, is empty, or holds the same format (whose files the export replaces).
absl::Status CheckExportTarget(const std::string& label, const std::string& directory,
                               ExportFormat format);

// Writes `tensors` (the whole model's parameters: host f32, full shapes, Hugging Face order and
// names, LoRA matrices included) as options.format says, after CheckExportTarget.
absl::Status WriteModelExport(const std::string& directory, const LlamaConfig& config,
                              std::vector<std::pair<std::string, Tensor>> tensors,
                              const HfExportProvenance& provenance, const ExportOptions& options);

}  // namespace kelvin::models
