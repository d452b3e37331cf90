// Training checkpoints for exact resume. A checkpoint is the directory <dir>/step_<8 digits>/ with
//   model<part>.safetensors      every parameter (this rank's shards) by name: its master
//                                weights (f32 for a bf16 model; bit-exact), read from and
//                                restored to the parameters' device;
//   optimizer<part>.safetensors  the AdamW moments, metadata "step" (steps completed),
//                                "optimizer_steps" and "job" (checked on resume);
//   layout.txt                   the layout that wrote it (checked first on resume: a checkpoint
//                                resumes with its own layout).
// One process writes "model.safetensors" and "optimizer.safetensors"; a parallel layout one
// model file per tensor-parallel rank (".tp<r>", written by data-parallel rank 0) and one
// optimizer file per tensor-parallel rank, or per (tp, dp) rank with the distributed optimizer.
// It is written as step_<N>.partial/ and renamed when complete (after every rank wrote), so a
// directory named step_<N> is always whole; a crash mid-write leaves only a .partial directory,
// which resume ignores (and the next save of that step replaces). The data order and the learning
// rate are functions of the step, so parameters + moments + step are the whole training state.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/optim/parameter_set.h"
#include "core/status.h"
#include "parallel/communicator.h"

namespace kelvin::launcher {

// This rank's part of a checkpoint: which files it writes and reads, and the layout they belong to.
struct CheckpointPart {
  std::string layout = "one process";  // e.g. "tp2 sp dp2 zero1"
  std::string model_file = "model.safetensors";
  std::string optimizer_file = "optimizer.safetensors";
  bool writes_model = true;      // false on data-parallel replicas (rank 0 writes their shard)
  bool writes_optimizer = true;  // false on replicas without the distributed optimizer
};

// The optimizer's state as a checkpoint holds it: named moments sharing the optimizer's storage.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  int64_t steps_taken = 0;
};

// Writes the checkpoint of `steps_completed` steps under `dir` (created if missing) and returns
// its path. Collective over `world` (nullptr: one process): every rank writes its part, rank 0
// renames the directory once all have.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, int64_t steps_completed,
                                           const std::string& job_name, const CheckpointPart& part,
                                           const ParameterSet& params,
                                           const OptimizerState& optimizer,
                                           parallel::Communicator* world);

// The newest complete checkpoint under `dir`, or nullopt when there is none (or no `dir`).
absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir);

// Restores this rank's parameters and optimizer state from `path`; returns the steps completed
// and the optimizer's step count. Every mismatch (missing or extra tensor, shape, dtype, another
// job's checkpoint or layout, a damaged file) is an error naming the file and the tensor; on
// error the parameters may be partly overwritten.
struct RestoredSteps {
  int64_t steps_completed = 0;
  int64_t optimizer_steps = 0;
};
absl::StatusOr<RestoredSteps> LoadCheckpoint(const std::string& path, const std::string& job_name,
                                             const CheckpointPart& part, ParameterSet& params,
                                             const OptimizerState& optimizer);

// Deletes all but the newest `keep_last` complete checkpoints under `dir` (0 keeps all).
absl::Status PruneCheckpoints(const std::string& dir, int keep_last);

}  // namespace kelvin::launcher
