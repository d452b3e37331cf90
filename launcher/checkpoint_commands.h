// `kelvin convert` and `kelvin eval`: a job's latest checkpoint as a Hugging Face directory, and
// the held-out loss of the job's model. Both run under any valid layout of the job (checkpoints
// reshard on load; launcher/checkpoint.h), every rank calling them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "launcher/trainer.h"

namespace kelvin::launcher {

// Restores the newest complete checkpoint of checkpoint.dir (an error naming the field when there
// is none) and writes its weights to `directory` (config.json + safetensors, gathered). Returns
// the checkpoint's step.
absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory);

// The model as the job would continue it (restored from checkpoint.dir when that holds a
// checkpoint and checkpoint.resume allows it, else model.hf_dir or the seed's initialisation) on
// training.eval_steps held-out batches; its step is the checkpoint's.
absl::StatusOr<EvalStats> EvaluateJob(const config::JobConfig& job);

}  // namespace kelvin::launcher
