// The Hugging Face model directory Kelvin writes (training.export_hf_dir, `kelvin convert`): the
// weights, config.json (true to the weights' dtype, with the source's special token ids),
// generation_config.json, the source model's tokenizer files, a README.md model card saying what
// produced it and, for an SSA model, the modeling code transformers runs with
// trust_remote_code=True (models/llama/hf/).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/io/hf_checkpoint.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// Files of the source model directory (model.hf_dir) an export copies verbatim when present: the
// tokenizer, its chat template and the generation settings.
inline constexpr const char* kHfCopiedSourceFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "generation_config.json"};

// What produced the weights, for the model card; every field may be empty when unknown.
struct HfExportProvenance {
  std::string source;      // "model.hf_dir=/models/Llama-3.1-8B" or "model.preset=tiny"
  std::string source_dir;  // model.hf_dir, whose kHfCopiedSourceFiles are copied; "" for a preset
  // A tokenizer given apart from the source (kelvin convert --tokenizer): its tokenizer files are
  // copied instead of source_dir's, and generation_config.json is written from the config's token
  // ids (the caller sets them from this tokenizer). "" for none.
  std::string tokenizer_dir;
  std::string job_name;
  int64_t steps = 0;                 // optimizer steps trained
  std::string data;                  // the job's data section, one line of text format
  std::optional<double> train_loss;  // the last step's
  std::optional<double> eval_loss;   // the last held-out evaluation's
};

// Writes the directory (io::WriteHfCheckpoint: all or nothing, one shard in memory at a time). The
// tensors are all f32 or all bf16 (config.json's dtype says which). A source file that exists but
// cannot be read is an error naming it; generation_config.json is written from config's token ids
// when the source has none (or provenance.tokenizer_dir is given).
absl::Status WriteHfModelDirectory(const std::string& directory, const LlamaConfig& config,
                                   const std::vector<io::HfTensorSource>& tensors,
                                   const HfExportProvenance& provenance);

}  // namespace kelvin::models
