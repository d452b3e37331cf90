// Checkpointing: a training run's side of checkpoint.dir: resuming from it (any layout's
// checkpoint, setting damaged ones aside), restoring a chosen one, the state a checkpoint holds,
// saves in turn or in the background, pruning (keep_last, keep_best), and the agreement after each
// step on preemption signals and background saves.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "training/checkpoint/async_checkpoint_saver.h"
#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/checkpoint_lock.h"
#include "training/job/data_sources.h"
#include "training/loss_spike.h"
#include "training/model_and_optimizer.h"

namespace kelvin::training {

struct SavedCheckpoint {
  std::string path;
  bool written_in_background = false;  // checkpoint.async_save, committed after training went on
};

// Which checkpoint to resume from after the loss of `step` (1-based) stopped the run as a spike:
// the newest of `checkpoint_dir` (checkpoint.dir) before the one of step - 1 (whose weights gave
// that loss).
std::string ResumeAdviceBeforeSpike(const std::string& checkpoint_dir, int64_t step);

class Checkpointing {
 public:
  // Every reference outlives this: the job, the model and optimizer a checkpoint holds, and the
  // run's loss-spike rule (in every checkpoint). `data`: the corpora whose identity checkpoints
  // record (read here).
  Checkpointing(const config::JobConfig& job, ModelAndOptimizer& trained, const DataSources& data,
                LossSpikeRule& loss_spike);

  // checkpoint.resume: restores the newest checkpoint of checkpoint.dir when the policy says so
  // (with checkpoint.skip_damaged, the newest that restores). Then the run's identity: the
  // restored run's, else `fresh_run_id` or, when empty, a new one (world rank 0's, broadcast).
  absl::Status Resume(const std::string& fresh_run_id);
  int64_t start_step() const { return start_step_; }  // > 0 after a restore

  // World rank 0 locks checkpoint.dir (checkpoint_lock.h) and holds the lock it returns (nullopt
  // on the other ranks); agreed by every rank.
  absl::StatusOr<std::optional<CheckpointDirectoryLock>> LockDirectory();
  // World rank 0: removes the step_<N>.partial / .deleting directories that interrupted saves
  // and deletions left in checkpoint.dir, with a log line each (a failure is a warning).
  void RemoveUnfinished();

  // Saves the checkpoint of `steps_completed` steps (with `eval_loss`, the held-out loss evaluated
  // after that step, for checkpoint.keep_best), after finishing a background save in flight: in
  // turn, or with checkpoint.async_save in the background unless `wait`. Collective.
  absl::Status Save(int64_t steps_completed, std::optional<double> eval_loss, bool wait);
  // What the ranks agree on after a step (one all-reduce): the preemption signal any rank
  // received (0: none), and whether every rank's part of the background save is written.
  struct StepAgreement {
    int preemption_signal = 0;
    bool background_save_written = false;
  };
  StepAgreement AgreeAfterStep();
  // Commits the background save in flight once this rank's part is written. Collective.
  absl::Status FinishBackgroundSave();
  // `error`, which every rank returns at the same point, after committing a background save in
  // flight (as a save in turn would have been). Collective.
  absl::Status StopOnAgreedError(const absl::Status& error);
  // The stop after `steps_completed` steps on preemption `signal`: that step's checkpoint saved
  // (unless `saved`: the step saved it already) and committed, the run directory's stop marker,
  // and the Cancelled status every rank returns. `eval_loss` as Save's. Collective.
  absl::Status StopForPreemption(int64_t steps_completed, int signal, bool saved,
                                 std::optional<double> eval_loss);
  const std::vector<SavedCheckpoint>& saved() const { return saved_; }

 private:
  // Resume's checkpoint part.
  absl::Status ResumeFromCheckpoint();
  // A new run identity, the same on every rank. Collective.
  std::string AgreedNewRunId();
  // checkpoint.skip_damaged: moves the checkpoint at `path`, which failed to restore with
  // `error`, aside to <path>.damaged (world rank 0) with a warning, so that resume, pruning and
  // `eval --all` pass it by. Collective.
  absl::Status SetAsideDamaged(const std::string& path, const absl::Status& error);
  // The chosen checkpoint of checkpoint.dir (nullopt: none, for the newest), the same on every
  // rank (training::AgreedCheckpoint). Collective.
  absl::StatusOr<std::optional<std::string>> AgreedCheckpoint(const CheckpointChoice& choice);
  // Restores the complete checkpoint at `path` (found alike on every rank); a failure on any rank
  // is that rank's error on every rank (the first failing rank's). Collective.
  absl::Status RestoreFrom(const std::string& path);
  // Records and logs a saved checkpoint; prunes old ones (world rank 0: a failure is a warning).
  void CheckpointSaved(const SavedCheckpoint& saved);
  // checkpoint.keep_best: logs which checkpoint it keeps (world rank 0).
  void LogBestCheckpoint(const BestCheckpoint& best) const;
  std::string LayoutName() const;              // e.g. "tp2 sp pp2 vp1 dp2 zero1"
  TrainingState CurrentTrainingState() const;  // this rank's, as checkpoints hold it
  int WorldRank() const { return trained_.grid().world_rank(); }

  const config::JobConfig& job_;
  ModelAndOptimizer& trained_;
  LossSpikeRule& loss_spike_;
  // The settings the order of the training data depends on, by field path (TrainingState).
  std::map<std::string, std::string> data_order_;
  AsyncCheckpointSaver background_save_;  // checkpoint.async_save
  int64_t start_step_ = 0;                // steps already done by the run this one resumes
  std::string run_id_;                    // the run's identity (its checkpoints carry it)
  std::vector<SavedCheckpoint> saved_;
};

}  // namespace kelvin::training
