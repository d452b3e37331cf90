// Turns a validated job config into the objects a run needs: the model's architecture (preset or
// Hugging Face directory, then the config's overrides), the model with its initial weights, and
// the training and evaluation data sources. Every error names the config field at fault.
#pragma once

#include <memory>

#include "configs/kelvin.pb.h"
#include "core/data/batch.h"
#include "models/llama/llama_model.h"

namespace kelvin::launcher {

absl::StatusOr<models::LlamaConfig> ResolveModelArchitecture(const config::ModelConfig& model);
// model.ssa (defaults resolved) as the SSA code's flags.
ssa::SsaOptions SsaOptionsFromConfig(const config::SsaConfig& ssa);

// This rank's part of the model (the whole model without parallelism) in f32 on the CPU, loaded
// from model.hf_dir or randomly initialised from the seed.
absl::StatusOr<std::unique_ptr<models::LlamaModel>> BuildModel(
    const config::JobConfig& job, const models::LlamaConfig& arch,
    const models::LlamaParallelism& parallelism);

struct DataSources {
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> eval;  // null when the job does not evaluate
  bool passkey = false;                     // batches are passkey samples (retrieval is scored)
};
absl::StatusOr<DataSources> BuildDataSources(const config::JobConfig& job,
                                             const models::LlamaConfig& arch);

}  // namespace kelvin::launcher
