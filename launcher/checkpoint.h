// Training checkpoints for exact resume. A checkpoint is the directory <dir>/step_<8 digits>/ with
//   model.safetensors      every parameter by name, in its training dtype (bit-exact);
//   optimizer.safetensors  the AdamW moments, metadata "step" (steps completed) and
//                          "optimizer_steps", and "job" (the job name, checked on resume).
// It is written as step_<N>.partial/ and renamed when complete, so a directory named step_<N> is
// always whole; a crash mid-write leaves only a .partial directory, which resume ignores (and the
// next save of that step replaces). The data order and the learning rate are functions of the
// step, so parameters + moments + step are the whole training state.
#pragma once

#include <optional>
#include <string>

#include "core/optim/adamw_optimizer.h"
#include "core/optim/parameter_set.h"
#include "core/status.h"

namespace kelvin::launcher {

// Writes the checkpoint of `steps_completed` steps under `dir` (created if missing) and returns
// its path.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, int64_t steps_completed,
                                           const std::string& job_name,
                                           const ParameterSet& params,
                                           const AdamWOptimizer& optimizer);

// The newest complete checkpoint under `dir`, or nullopt when there is none (or no `dir`).
absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir);

// Restores parameters and optimizer state from `path`; returns the steps completed. Every
// mismatch (missing or extra tensor, shape, dtype, another job's checkpoint, a damaged file) is an
// error naming the file and the tensor; on error the parameters may be partly overwritten.
absl::StatusOr<int64_t> LoadCheckpoint(const std::string& path, const std::string& job_name,
                                       ParameterSet& params, AdamWOptimizer& optimizer);

// Deletes all but the newest `keep_last` complete checkpoints under `dir` (0 keeps all).
absl::Status PruneCheckpoints(const std::string& dir, int keep_last);

}  // namespace kelvin::launcher
