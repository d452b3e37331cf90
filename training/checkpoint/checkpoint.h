// Training checkpoints for exact resume, under the layout that wrote them or any other: saving (in
// stages, so a part can be written in the background), finding, choosing, restoring and pruning
// the step_<N> directories of checkpoint.dir (format: README, Formats).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/context.h"
#include "core/io/tensor_region.h"
#include "core/status.h"
#include "parallel/comm/communicator.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/checkpoint/checkpoint_reader.h"

namespace kelvin::training {

// One piece of this rank's training state.
struct CheckpointTensor {
  std::string name;         // its logical tensor, e.g. "adamw.m:model.norm.weight"
  io::TensorRegion region;  // where `data` sits in the logical tensor
  Tensor data;              // region.numel() elements, contiguous, on any device
  bool written = true;      // false: a replica's copy of a piece another rank writes
};

// This rank's training state, as the trainer lays it out.
struct TrainingState {
  std::string layout = "one process";  // e.g. "tp2 sp dp2 zero1"
  std::vector<CheckpointTensor> tensors;
  int64_t optimizer_steps = 0;
  // The logical tensors of the whole job (every rank's): a checkpoint holding another is of
  // another model.
  std::set<std::string> job_tensors;
  // The settings the order of the training data depends on, by field path (recorded, and
  // compared on resume by the trainer).
  std::map<std::string, std::string> data_order;
  // The held-out loss evaluated after the step being saved, when the run evaluated at it.
  std::optional<double> eval_loss;
  // The run's identity (NewRunId), in checkpoint.json and every part.
  std::string run_id;
  // The loss-spike rule's memory after the step being saved (nullopt: not recorded).
  std::optional<LossSpikeRecord> loss_spike;
  // The frozen base the model holds (nullopt: a full fine-tune), recorded and, on a restore,
  // compared with the checkpoint's (CheckFrozenBase).
  std::optional<FrozenBaseRecord> base;
};

// A checkpoint being saved, in three stages: Begin (collective) creates step_<N>.partial and takes
// this rank's pieces to host memory; WritePart writes this rank's part file (no communication:
// any thread may run it while training goes on); Commit (collective) agrees that every part is
// written and renames the directory.
class PendingCheckpoint {
 public:
  // The checkpoint of `steps_completed` steps under `dir` (created if missing). Device tensors are
  // copied to the host; host tensors too with `snapshot_host_tensors` (else the part is written
  // from the training state itself, which must not change before WritePart).
  static absl::StatusOr<PendingCheckpoint> Begin(const std::string& dir, int64_t steps_completed,
                                                 const std::string& job_name,
                                                 const TrainingState& state, const Context& ctx,
                                                 parallel::Communicator& world,
                                                 bool snapshot_host_tensors);
  absl::Status WritePart() const;  // with each piece's checksum
  // `part_written`: this rank's WritePart outcome. Returns the checkpoint's path.
  absl::StatusOr<std::string> Commit(const absl::Status& part_written,
                                     parallel::Communicator& world) const;
  const std::string& part_file() const { return part_file_; }

 private:
  std::filesystem::path final_path_, partial_;
  std::string part_file_;
  int rank_ = 0;
  std::vector<std::pair<std::string, Tensor>> pieces_;  // host, 1-d
  std::map<std::string, std::string> metadata_;
};

// Writes the checkpoint of `steps_completed` steps under `dir` (created if missing) and returns
// its path: the three stages of PendingCheckpoint in turn. Collective over `world`.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, int64_t steps_completed,
                                           const std::string& job_name, const TrainingState& state,
                                           const Context& ctx, parallel::Communicator& world);

// The newest complete checkpoint under `dir`, or nullopt when there is none (or no `dir`).
absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir);
// The complete checkpoint of `step` under `dir`; an error listing the steps there when it is not.
absl::StatusOr<std::string> CheckpointOfStep(const std::string& dir, int64_t step);
// The steps of a checkpoint directory's path (".../step_00000120" -> 120), else nullopt.
std::optional<int64_t> CheckpointStepOf(const std::string& path);

// Restores every tensor of this rank's `state` from the checkpoint at `path` (on ctx's device;
// a model copy of master weights is the caller's to refresh); returns the steps completed, the
// optimizer's step count and the layout that saved it. Every mismatch (a missing or extra tensor,
// another shape or dtype, another job's checkpoint, a missing or damaged file, elements no part
// holds) is an error naming the file and the tensor; on error the state may be partly
// overwritten.
struct RestoredSteps {
  int64_t steps_completed = 0;
  int64_t optimizer_steps = 0;
  std::string saved_layout;
  std::map<std::string, std::string> saved_data_order;
  std::string saved_by;    // the Kelvin version that wrote it ("" when not recorded)
  std::string run_id;      // the run that wrote it ("" for a kelvin-checkpoint-3)
  std::string saved_with;  // the libraries that wrote it (LibraryVersions(); "" when not recorded)
  std::optional<LossSpikeRecord> loss_spike;  // nullopt when not recorded
};
absl::StatusOr<RestoredSteps> LoadCheckpoint(const std::string& path, const std::string& job_name,
                                             const TrainingState& state, const Context& ctx);

// The checkpoint at `path` opened for reading, after checking that it is job `job_name`'s.
absl::StatusOr<CheckpointReader> OpenJobCheckpoint(const std::string& path,
                                                   const std::string& job_name);

// An error naming the first tensor of the checkpoint that is not one of `job_tensors` (the
// checkpoint is of another model).
absl::Status CheckNoOtherTensors(const CheckpointReader& reader,
                                 const std::set<std::string>& job_tensors);

// Removes what interrupted saves and deletions leave in checkpoint.dir (step_<N>.partial and
// step_<N>.deleting directories, never complete checkpoints); returns their paths. Only one job
// may be writing `dir` (at the start of a run, before its first save).
absl::StatusOr<std::vector<std::string>> RemoveCheckpointLeftovers(const std::string& dir);

// The complete checkpoint under `dir` with the lowest evaluation loss (the earliest of equal ones),
// or nullopt when none has one (none was saved at a step the run evaluated at).
struct BestCheckpoint {
  std::string path;
  int64_t step = 0;
  double eval_loss = 0;
};
absl::StatusOr<std::optional<BestCheckpoint>> FindBestCheckpoint(const std::string& dir);

// Which complete checkpoint of checkpoint.dir a command reads (`kelvin convert` and `kelvin eval`
// --step N / --best): the newest (the default), the one of `step`, or with `best` the one of the
// lowest evaluation loss (FindBestCheckpoint).
struct CheckpointChoice {
  std::optional<int64_t> step;
  bool best = false;

  static CheckpointChoice Step(int64_t step) { return {step, false}; }
  static CheckpointChoice Best() { return {std::nullopt, true}; }
  bool newest() const { return !step.has_value() && !best; }
};
// "checkpoint.dir=\"DIR\" holds no complete checkpoint (step_<N> directories)" and what that
// means for the command (`consequence`, e.g. "nothing to convert").
absl::Status NoCompleteCheckpointError(const std::string& dir, absl::string_view consequence);
// The steps of the complete checkpoints under `dir`, oldest first (none when it does not exist).
absl::StatusOr<std::vector<int64_t>> CompleteCheckpointSteps(const std::string& dir);
// Its path: nullopt when the newest is asked for and `dir` holds no complete checkpoint; an error
// naming checkpoint.dir and what it holds when the step's or a best checkpoint is missing.
absl::StatusOr<std::optional<std::string>> ChooseCheckpoint(const std::string& dir,
                                                            const CheckpointChoice& choice);

// Deletes all but the newest `keep_last` complete checkpoints under `dir` (0 keeps all), and with
// `keep_best` not the one FindBestCheckpoint names, which it returns (nullopt without keep_best).
absl::StatusOr<std::optional<BestCheckpoint>> PruneCheckpoints(const std::string& dir,
                                                               int keep_last, bool keep_best);

}  // namespace kelvin::training
