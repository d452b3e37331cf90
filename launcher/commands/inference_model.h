// The job's model for the commands that only run it forward (generate, eval --data): on the CPU
// in f32, one process, its weights read whole from the chosen checkpoint of checkpoint.dir (newest,
// --step N, --best; any layout wrote it, as convert reads it), else from model.hf_dir.
#pragma once

#include <memory>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::launcher {

// An error when there are no trained weights (no checkpoint and no model.hf_dir), naming what is
// missing; a checkpoint of another model names its first foreign tensor (an SSA one, the flag).
absl::StatusOr<std::unique_ptr<models::LlamaModel>> LoadInferenceModel(
    const config::JobConfig& job, const training::CheckpointChoice& choice);

}  // namespace kelvin::launcher
