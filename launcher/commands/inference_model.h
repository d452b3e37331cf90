// The job's model for the commands that only run it forward (generate, eval --data): on the CPU
// in f32, its weights (this rank's shard under tensor parallelism) from the chosen checkpoint of
// checkpoint.dir (newest, --step N, --best; any layout wrote it), else from model.hf_dir.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "data/tokenizer/tokenizer.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::launcher {

// An error when there are no trained weights (no checkpoint and no model.hf_dir), naming what is
// missing; a checkpoint of another model names its first foreign tensor (an SSA one, the flag).
// `tp`: the tensor-parallel group the model is split over (nullptr: this process holds it whole).
absl::StatusOr<std::unique_ptr<models::LlamaModel>> LoadInferenceModel(
    const config::JobConfig& job, const training::CheckpointChoice& choice,
    parallel::Communicator* tp = nullptr);

// model.hf_dir's tokenizer when it has a tokenizer.json Kelvin reads, else nullopt. When
// `needed_by` names what needs it (e.g. "text prompts"), its absence or a load error is the error
// "<needed_by> need the model's tokenizer: <why>; <instead>"; otherwise the caller goes on without
// one, with a warning when the file is there but unsupported.
absl::StatusOr<std::optional<data::Tokenizer>> LoadModelTokenizer(const config::JobConfig& job,
                                                                  const std::string& needed_by,
                                                                  const std::string& instead);

}  // namespace kelvin::launcher
