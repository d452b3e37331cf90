// Resuming, restoring, saving and pruning the checkpoints of checkpoint.dir, and the stops
// (preemption, agreed errors) that commit a background save first.
#include "training/checkpointing.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/build_info.h"
#include "core/io/atomic_file.h"
#include "core/logging.h"
#include "core/profile_range.h"
#include "parallel/comm/stop_deadline.h"
#include "training/checkpoint/agreed_checkpoint.h"
#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/preemption.h"
#include "training/checkpoint/training_state.h"
#include "training/job/job_plan.h"
#include "training/run_directory.h"

namespace kelvin::training {
namespace {

// What to do after a preemption stop: run the job again, or under SLURM what happens next.
std::string ResumeAdvice() {
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  if (slurm_job == nullptr) return "run the same job again to resume";
  return absl::StrCat("SLURM job ", slurm_job,
                      " continues from it when it runs again (its batch script requeues it after "
                      "a time-limit warning; a preempted job is requeued by SLURM)");
}

}  // namespace

Checkpointing::Checkpointing(const config::JobConfig& job, ModelAndOptimizer& trained,
                             const DataSources& data, LossSpikeRule& loss_spike)
    : job_(job), trained_(trained), loss_spike_(loss_spike) {
  const config::TrainingConfig& t = job.training();
  const int64_t global_batch_size =
      t.micro_batch_size() * trained.micro_batches() * trained.grid().spec().data_parallel;
  data_order_ = {{"data", job.data().ShortDebugString()},
                 {"data.corpora", absl::StrJoin(data.corpora, "; ")},
                 {"data.eval corpus", data.eval_corpus},
                 {"training.global_batch_size", std::to_string(global_batch_size)},
                 {"training.seq_length", std::to_string(t.seq_length())},
                 {"training.seed", std::to_string(t.seed())}};
  for (const NamedEvalSource& also : data.also_eval) {
    data_order_["data.also_eval " + also.name + " corpus"] = also.corpus;
  }
}

absl::Status Checkpointing::Resume(const std::string& fresh_run_id) {
  KELVIN_RETURN_IF_ERROR(ResumeFromCheckpoint());
  if (run_id_.empty()) run_id_ = fresh_run_id.empty() ? AgreedNewRunId() : fresh_run_id;
  return absl::OkStatus();
}

absl::Status Checkpointing::ResumeFromCheckpoint() {
  const config::CheckpointConfig& c = job_.checkpoint();
  if (c.dir().empty() || c.resume() == config::CheckpointConfig::NEVER) return absl::OkStatus();
  for (std::string newest_error;;) {
    KELVIN_ASSIGN_OR_RETURN(const std::optional<std::string> latest, AgreedCheckpoint({}));
    if (!latest.has_value() && !newest_error.empty()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint.skip_damaged: no checkpoint of checkpoint.dir=\"", c.dir(),
          "\" restores (each was set aside as step_<N>.damaged); the newest failed with: ",
          newest_error));
    }
    if (!latest.has_value()) {
      if (c.resume() == config::CheckpointConfig::REQUIRED) {
        return absl::NotFoundError(absl::StrCat(
            "checkpoint.resume=REQUIRED but checkpoint.dir=\"", c.dir(),
            "\" holds no complete checkpoint (step_<N> directories); use AUTO to start afresh"));
      }
      return absl::OkStatus();
    }
    const absl::Status restored = RestoreFrom(*latest);
    // Damage is DataLoss (a checksum, a truncated or foreign part, a bad index) or NotFound (a
    // missing part); another job's, version's or model's checkpoint is FailedPrecondition, and
    // every older checkpoint would fail the same way.
    const bool damaged = absl::IsDataLoss(restored) || absl::IsNotFound(restored);
    if (restored.ok() || !c.skip_damaged() || !damaged) return restored;
    if (newest_error.empty()) newest_error = std::string(restored.message());
    KELVIN_RETURN_IF_ERROR(SetAsideDamaged(*latest, restored));
  }
}

absl::Status Checkpointing::SetAsideDamaged(const std::string& path, const absl::Status& error) {
  const std::string aside = path + ".damaged";
  absl::Status moved = absl::OkStatus();
  if (WorldRank() == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(aside, ignored);
    moved = io::RenameDurably(path, aside);
    KLOG(WARNING) << "checkpoint.skip_damaged: SKIPPING the checkpoint " << path
                  << ", which does not restore: " << error.message() << "; it is kept as " << aside
                  << " and the run resumes from an older checkpoint";
  }
  return parallel::AgreeOnStatus(trained_.grid().world(), moved,
                                 "setting aside the damaged checkpoint " + path);
}

std::string Checkpointing::AgreedNewRunId() {
  std::string id = NewRunId();
  Tensor bytes = Tensor::Empty({static_cast<int64_t>(id.size())}, DType::kI32);  // world rank 0's
  std::copy(id.begin(), id.end(), bytes.data<int32_t>());
  trained_.grid().world().Broadcast(bytes, 0);
  std::transform(bytes.data<int32_t>(), bytes.data<int32_t>() + bytes.numel(), id.begin(),
                 [](int32_t c) { return static_cast<char>(c); });
  return id;
}

absl::StatusOr<std::optional<CheckpointDirectoryLock>> Checkpointing::LockDirectory() {
  const std::string& dir = job_.checkpoint().dir();
  std::optional<CheckpointDirectoryLock> lock;
  absl::Status locked = absl::OkStatus();
  if (WorldRank() == 0) {
    absl::StatusOr<CheckpointDirectoryLock> acquired = CheckpointDirectoryLock::Acquire(dir);
    if (acquired.ok()) {
      lock.emplace(*std::move(acquired));
    } else {
      locked = acquired.status();
    }
  }
  KELVIN_RETURN_IF_ERROR(
      parallel::AgreeOnStatus(trained_.grid().world(), locked, "locking checkpoint.dir=" + dir));
  return lock;
}

absl::StatusOr<std::optional<std::string>> Checkpointing::AgreedCheckpoint(
    const CheckpointChoice& choice) {
  return training::AgreedCheckpoint(trained_.grid().world(), job_.checkpoint().dir(), choice);
}

absl::Status Checkpointing::RestoreFrom(const std::string& path) {
  parallel::Communicator& world = trained_.grid().world();
  trained_.SettleParameters();  // the restore refreshes the model through the gradient buffers
  const TrainingState state = CurrentTrainingState();
  absl::StatusOr<RestoredSteps> loaded = LoadCheckpoint(path, job_.name(), state, trained_.ctx());
  // A damaged part may fail some ranks only: every rank takes the first failing rank's error, so
  // that none trains without the others and all decide alike whether to skip the checkpoint.
  KELVIN_RETURN_IF_ERROR(parallel::ShareFirstFailure(world, loaded.status()));
  const RestoredSteps& restored = *loaded;
  start_step_ = restored.steps_completed;
  run_id_ = restored.run_id;  // "" for a kelvin-checkpoint-3: Resume draws a new one
  trained_.optimizer().Restored(restored.optimizer_steps);
  KLOG_RANK0(INFO) << "resumed from " << path << " (" << start_step_ << " steps done)";
  if (restored.loss_spike.has_value()) {
    loss_spike_.Restore(*restored.loss_spike);
  } else if (job_.training().loss_spike().action() != config::LossSpikeConfig::OFF) {
    KLOG_RANK0(INFO) << "the checkpoint records no recent losses (an older Kelvin wrote it): "
                        "training.loss_spike judges from the steps of this run on";
  }
  if (!restored.saved_by.empty() && restored.saved_by != KelvinVersion()) {
    KLOG_RANK0(INFO) << "the checkpoint was written by kelvin " << restored.saved_by
                     << "; this is kelvin " << KelvinVersion();
  }
  if (!restored.saved_with.empty() && restored.saved_with != LibraryVersions()) {
    // OpenBLAS picks its GEMM kernels per CPU: a requeue onto another CPU model changes the last
    // bits of every step (experiments/ssa/RESULTS.md measured it).
    KLOG_RANK0(WARNING) << "the checkpoint was written with " << restored.saved_with
                        << "; this run has " << LibraryVersions()
                        << ": other kernels round differently, so the run continues within "
                           "rounding of the one it would have been, not bit-identically (on a "
                           "partition of mixed CPUs, OPENBLAS_CORETYPE in the batch script, e.g. "
                           "Haswell, pins OpenBLAS's kernels)";
  }
  std::vector<std::string> unrecorded;  // settings the checkpoint's checkpoint.json lacks
  for (const auto& [setting, value] : state.data_order) {
    const auto saved = restored.saved_data_order.find(setting);
    if (saved == restored.saved_data_order.end()) unrecorded.push_back(setting);
    if (saved != restored.saved_data_order.end() && saved->second != value) {
      KLOG_RANK0(WARNING) << "the checkpoint's run had " << setting << "=" << saved->second
                          << ", this job has " << value
                          << ": the training data from here on is not what that run would have "
                             "read (rows may repeat or be skipped)";
    }
  }
  if (!unrecorded.empty()) {
    KLOG_RANK0(WARNING) << "the checkpoint records no data order for "
                        << absl::StrJoin(unrecorded, ", ")
                        << " (an older or edited checkpoint.json): whether the training data from "
                           "here on is what its run would have read cannot be checked";
  }
  if (restored.saved_layout != state.layout) {
    KLOG_RANK0(INFO) << "resharded the checkpoint of layout \"" << restored.saved_layout
                     << "\" to this job's \"" << state.layout
                     << "\": the run continues within rounding of the saved one's";
  }
  return absl::OkStatus();
}

std::string ResumeAdviceBeforeSpike(const std::string& dir, int64_t step) {
  if (dir.empty()) return "start the run again";
  // The checkpoint of step - 1 holds the weights that gave the spike; those before it were judged
  // by a kept loss. Every rank lists the same directory (rank 0 pruned it before this step).
  const absl::StatusOr<std::vector<int64_t>> listed = CompleteCheckpointSteps(dir);
  if (!listed.ok()) {
    return absl::StrCat("resume from a checkpoint before step ", step - 1, " (checkpoint.dir=", dir,
                        " does not list: ", listed.status().message(), ")");
  }
  std::vector<int64_t> before, newer;
  for (const int64_t saved : *listed) (saved < step - 1 ? before : newer).push_back(saved);
  if (before.empty()) {
    return absl::StrCat("start afresh (checkpoint.dir=", dir, " holds no checkpoint before step ",
                        step - 1, ", whose weights gave this loss)");
  }
  const std::string path = (std::filesystem::path(dir) / StepDirectoryName(before.back())).string();
  if (newer.empty()) return absl::StrCat("run the job again: it resumes from ", path);
  return absl::StrCat("resume from ", path, ": move the newer checkpoints (steps ",
                      absl::StrJoin(newer, ", "), ") out of checkpoint.dir first");
}

std::string Checkpointing::LayoutName() const {
  // What checkpoints have always called one process.
  if (trained_.grid().spec().world_size == 1) return "one process";
  return training::LayoutName(trained_.grid().spec(), trained_.optimizer().ShardsState());
}

TrainingState Checkpointing::CurrentTrainingState() const {
  // The ranks of a (cp, dp) group hold the same model slice; ZeRO-1 shards over all of them.
  const ReplicaPlace place{trained_.grid().dp_cp().rank(), trained_.optimizer().ShardsState()};
  TrainingState state = TrainingStateOf(trained_.model(), trained_.optimizer().StateSpans(),
                                        trained_.optimizer().steps_taken(), place, LayoutName());
  state.run_id = run_id_;
  state.loss_spike = loss_spike_.Record();
  state.data_order = data_order_;
  return state;
}

absl::Status Checkpointing::Save(int64_t steps_completed, std::optional<double> eval_loss,
                                 bool wait) {
  const ProfileRange range(absl::StrCat("checkpoint save of step ", steps_completed));
  const config::CheckpointConfig& c = job_.checkpoint();
  parallel::Communicator& world = trained_.grid().world();
  if (background_save_.in_flight()) KELVIN_RETURN_IF_ERROR(FinishBackgroundSave());
  trained_.SettleParameters();
  TrainingState state = CurrentTrainingState();
  state.eval_loss = eval_loss;    // for checkpoint.keep_best
  if (!c.async_save() || wait) {  // waiting anyway: no host copy, no thread
    KELVIN_ASSIGN_OR_RETURN(
        const std::string path,
        SaveCheckpoint(c.dir(), steps_completed, job_.name(), state, trained_.ctx(), world));
    CheckpointSaved({path, false});
    return absl::OkStatus();
  }
  KELVIN_ASSIGN_OR_RETURN(
      PendingCheckpoint pending,
      PendingCheckpoint::Begin(c.dir(), steps_completed, job_.name(), state, trained_.ctx(), world,
                               /*snapshot_host_tensors=*/true));
  background_save_.Start(std::move(pending));
  return absl::OkStatus();
}

absl::Status Checkpointing::FinishBackgroundSave() {
  KELVIN_ASSIGN_OR_RETURN(const std::string path, background_save_.Finish(trained_.grid().world()));
  CheckpointSaved({path, true});
  return absl::OkStatus();
}

absl::Status Checkpointing::StopOnAgreedError(const absl::Status& error) {
  if (background_save_.in_flight()) {
    const absl::Status committed = FinishBackgroundSave();
    if (!committed.ok()) KLOG_RANK0(WARNING) << "the background save failed too: " << committed;
  }
  return error;
}

void Checkpointing::CheckpointSaved(const SavedCheckpoint& saved) {
  saved_.push_back(saved);
  KLOG_RANK0(INFO) << "saved checkpoint " << saved.path
                   << (saved.written_in_background ? " (written in the background)" : "");
  if (WorldRank() == 0) {
    // Rank 0's alone: a failure is a warning (the others would wait for it in the next step).
    const config::CheckpointConfig& c = job_.checkpoint();
    const absl::StatusOr<std::optional<BestCheckpoint>> pruned =
        PruneCheckpoints(c.dir(), c.keep_last(), c.keep_best());
    if (!pruned.ok()) {
      KLOG(WARNING) << "keeping old checkpoints: " << pruned.status()
                    << " (no checkpoint is deleted until that is mended or removed)";
    } else if (pruned->has_value()) {
      LogBestCheckpoint(**pruned);
    }
  }
}

void Checkpointing::LogBestCheckpoint(const BestCheckpoint& best) const {
  KLOG(INFO) << absl::StrFormat(
      "the lowest evaluation loss so far: %.4f after step %d (%s, kept; `kelvin convert --best` "
      "exports it)",
      best.eval_loss, best.step, best.path);
}

Checkpointing::StepAgreement Checkpointing::AgreeAfterStep() {
  // Every rank stops after the same step (the signal may reach the ranks at different times) and
  // commits the background save at the same step.
  const bool saving = background_save_.in_flight();
  const int32_t writing = saving && !background_save_.PartFinished() ? 1 : 0;
  Tensor flags = Tensor::Empty({2}, DType::kI32);  // [signal, a rank still writing]
  flags.data<int32_t>()[0] = PreemptionSignal();
  flags.data<int32_t>()[1] = writing;
  trained_.grid().world().AllReduce(flags, parallel::ReduceOp::kMax);
  return {flags.data<int32_t>()[0], saving && flags.data<int32_t>()[1] == 0};
}

absl::Status Checkpointing::StopForPreemption(int64_t steps_completed, int signal, bool saved,
                                              std::optional<double> eval_loss) {
  parallel::DisarmStopDeadline();
  if (!saved) {
    KELVIN_RETURN_IF_ERROR(Save(steps_completed, eval_loss, /*wait=*/true));
  } else if (background_save_.in_flight()) {  // this step's
    KELVIN_RETURN_IF_ERROR(FinishBackgroundSave());
  }
  if (WorldRank() == 0) {
    const absl::Status marked = MarkStoppedForPreemption(job_, steps_completed, signal);
    if (!marked.ok()) KLOG(WARNING) << "the run directory's stop marker: " << marked;
  }
  return absl::CancelledError(
      absl::StrCat("stopped by ", StopSignalDescription(signal), " after step ", steps_completed,
                   " of ", job_.training().steps(), "; the checkpoint of step ", steps_completed,
                   " is saved in ", job_.checkpoint().dir(), ": ", ResumeAdvice()));
}

void Checkpointing::RemoveUnfinished() {
  const absl::StatusOr<std::vector<std::string>> removed =
      RemoveCheckpointLeftovers(job_.checkpoint().dir());
  if (!removed.ok()) {
    KLOG(WARNING) << "unfinished checkpoints stay: " << removed.status();
    return;
  }
  for (const std::string& path : *removed) {
    KLOG(INFO) << "removed " << path << ", left by an interrupted checkpoint save or deletion";
  }
}

}  // namespace kelvin::training
