// Training checkpoints: every rank writes its pieces into a .partial directory that is renamed
// when complete; restore assembles each rank's tensors from whichever pieces hold them, every
// piece checked; the newest is found and old ones pruned.
#include "training/checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/build_info.h"
#include "core/copy.h"
#include "core/io/atomic_file.h"
#include "core/io/crc32c.h"
#include "core/io/safetensors.h"
#include "models/llama/llama_config.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/checkpoint/frozen_base.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

// What a checkpoint directory becomes while it is deleted (pruned, replaced): never a complete
// checkpoint's name, so an interrupted deletion leaves nothing that looks complete.
constexpr const char* kDeletingSuffix = ".deleting";
constexpr const char* kPartialSuffix = ".partial";

// Deletes the checkpoint directory `path`: renamed first, then removed.
absl::Status DeleteCheckpointDirectory(const fs::path& path) {
  const fs::path doomed = path.string() + kDeletingSuffix;
  std::error_code error;
  fs::remove_all(doomed, error);
  fs::rename(path, doomed, error);
  if (!error) fs::remove_all(doomed, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot delete checkpoint ", path.string(), ": ", error.message()));
  }
  return absl::OkStatus();
}

// Complete checkpoints under dir by step (empty when dir does not exist).
absl::StatusOr<std::map<int64_t, fs::path>> CompleteCheckpoints(const std::string& dir) {
  std::map<int64_t, fs::path> found;
  std::error_code error;
  if (!fs::exists(dir, error)) return found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::optional<int64_t> step = StepOfDirectoryName(entry.path().filename().string());
    if (step.has_value() && entry.is_directory()) found[*step] = entry.path();
  }
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot list checkpoint directory ", dir, ": ", error.message()));
  }
  return found;
}

// A fresh `partial` directory holding the index.
absl::Status CreatePartialDirectory(const fs::path& partial, const CheckpointIndex& index) {
  std::error_code error;
  fs::remove_all(partial, error);
  fs::create_directories(partial, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create checkpoint directory ",
                                                    partial.string(), ": ", error.message()));
  }
  return WriteCheckpointIndex(partial, index);
}

}  // namespace

absl::StatusOr<PendingCheckpoint> PendingCheckpoint::Begin(
    const std::string& dir, int64_t steps_completed, const std::string& job_name,
    const TrainingState& state, const Context& ctx, parallel::Communicator& world,
    bool snapshot_host_tensors) {
  PendingCheckpoint checkpoint;
  checkpoint.final_path_ = fs::path(dir) / StepDirectoryName(steps_completed);
  checkpoint.partial_ = fs::path(dir) / (StepDirectoryName(steps_completed) + kPartialSuffix);
  const int rank = world.rank();
  const int parts = world.size();
  checkpoint.rank_ = rank;
  checkpoint.part_file_ = (checkpoint.partial_ / PartFileName(rank, parts)).string();
  // Each stage agrees on its outcome before the next, so a rank that fails does not leave the
  // others waiting, and the directory is renamed only when every part is written.
  absl::Status created = absl::OkStatus();
  if (rank == 0) {
    created = CreatePartialDirectory(
        checkpoint.partial_, {job_name, state.layout, steps_completed, state.optimizer_steps, parts,
                              state.data_order, state.eval_loss, KelvinVersion(), state.run_id,
                              LibraryVersions(), state.loss_spike, state.base});
  }
  KELVIN_RETURN_IF_ERROR(parallel::AgreeOnStatus(
      world, created, "creating checkpoint " + checkpoint.partial_.string()));
  checkpoint.metadata_ = {{"format", kCheckpointFormat},
                          {kRunKey, state.run_id},
                          {kStepKey, absl::StrCat(steps_completed)}};
  for (const CheckpointTensor& t : state.tensors) {
    if (!t.written) continue;
    const Tensor host = t.data.is_cpu() && !snapshot_host_tensors
                            ? t.data
                            : CopyToDevice(ctx, t.data, Device::Cpu());
    checkpoint.pieces_.emplace_back(t.name, host.View({-1}));
    checkpoint.metadata_[kRegionKey + t.name] = t.region.Encode();
  }
  return checkpoint;
}

absl::Status PendingCheckpoint::WritePart() const {
  std::map<std::string, std::string> metadata = metadata_;
  for (const auto& [name, piece] : pieces_) {
    const std::string_view bytes(static_cast<const char*>(piece.raw_data()), piece.nbytes());
    metadata[kChecksumKey + name] = FormatChecksum(io::Crc32c(bytes));
  }
  return io::WriteSafetensors(part_file_, pieces_, metadata);
}

absl::StatusOr<std::string> PendingCheckpoint::Commit(const absl::Status& part_written,
                                                      parallel::Communicator& world) const {
  const absl::Status written = parallel::AgreeOnStatus(
      world, part_written, "writing a part of checkpoint " + partial_.string());
  if (!written.ok()) {  // e.g. a full disk: the unfinished directory goes (the next run's would)
    if (rank_ == 0) {
      std::error_code ignored;
      fs::remove_all(partial_, ignored);
    }
    return written;
  }
  absl::Status renamed = absl::OkStatus();
  if (rank_ == 0) {
    std::error_code error;
    if (fs::exists(final_path_, error)) {  // an older save of the same step (a rerun)
      renamed = DeleteCheckpointDirectory(final_path_);
    }
    if (renamed.ok()) renamed = io::SyncDirectory(partial_.string());  // the parts' names
    if (renamed.ok()) renamed = io::RenameDurably(partial_.string(), final_path_.string());
  }
  // Nobody reads the directory before it is renamed.
  KELVIN_RETURN_IF_ERROR(
      parallel::AgreeOnStatus(world, renamed, "renaming checkpoint " + partial_.string()));
  return final_path_.string();
}

absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, int64_t steps_completed,
                                           const std::string& job_name, const TrainingState& state,
                                           const Context& ctx, parallel::Communicator& world) {
  KELVIN_ASSIGN_OR_RETURN(const PendingCheckpoint checkpoint,
                          PendingCheckpoint::Begin(dir, steps_completed, job_name, state, ctx,
                                                   world, /*snapshot_host_tensors=*/false));
  return checkpoint.Commit(checkpoint.WritePart(), world);
}

absl::StatusOr<std::string> CheckpointOfStep(const std::string& dir, int64_t step) {
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  const auto found = checkpoints.find(step);
  if (found != checkpoints.end()) return found->second.string();
  std::vector<int64_t> steps;
  for (const auto& [complete, path] : checkpoints) steps.push_back(complete);
  return absl::NotFoundError(absl::StrCat(
      "checkpoint.dir=\"", dir, "\" has no complete checkpoint of step ", step, " (it has ",
      steps.empty() ? std::string("none") : absl::StrCat("steps ", absl::StrJoin(steps, ", ")),
      ")"));
}

std::optional<int64_t> CheckpointStepOf(const std::string& path) {
  return StepOfDirectoryName(fs::path(path).filename().string());
}

absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir) {
  if (dir.empty()) return std::optional<std::string>();
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  if (checkpoints.empty()) return std::optional<std::string>();
  return std::optional<std::string>(checkpoints.rbegin()->second.string());
}

absl::Status NoCompleteCheckpointError(const std::string& dir, absl::string_view consequence) {
  return absl::NotFoundError(absl::StrCat("checkpoint.dir=\"", dir,
                                          "\" holds no complete checkpoint (step_<N> directories)",
                                          consequence));
}

absl::StatusOr<std::vector<int64_t>> CompleteCheckpointSteps(const std::string& dir) {
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  std::vector<int64_t> steps;
  for (const auto& [step, path] : checkpoints) steps.push_back(step);
  return steps;
}

absl::StatusOr<std::optional<std::string>> ChooseCheckpoint(const std::string& dir,
                                                            const CheckpointChoice& choice) {
  if (choice.newest()) return LatestCheckpoint(dir);
  if (choice.step.has_value()) {
    KELVIN_ASSIGN_OR_RETURN(std::string path, CheckpointOfStep(dir, *choice.step));
    return std::optional<std::string>(std::move(path));
  }
  KELVIN_ASSIGN_OR_RETURN(const std::optional<BestCheckpoint> best, FindBestCheckpoint(dir));
  if (!best.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint.dir=\"", dir,
        "\" holds no checkpoint with an evaluation loss (those saved at steps the run evaluated "
        "at, with training.eval_interval set): take the latest, or one --step N"));
  }
  return std::optional<std::string>(best->path);
}

absl::StatusOr<RestoredSteps> LoadCheckpoint(const std::string& path, const std::string& job_name,
                                             const TrainingState& state, const Context& ctx) {
  KELVIN_ASSIGN_OR_RETURN(const CheckpointReader reader, OpenJobCheckpoint(path, job_name));
  KELVIN_RETURN_IF_ERROR(CheckNoOtherTensors(reader, state.job_tensors));
  KELVIN_RETURN_IF_ERROR(CheckFrozenBase(path, reader.index().base, state.base));
  for (const CheckpointTensor& target : state.tensors) {
    KELVIN_ASSIGN_OR_RETURN(const Tensor stored,
                            reader.Read(target.name, target.region, target.data.dtype()));
    Tensor destination = target.data;
    CopyTensor(ctx, stored.View(target.data.shape()), destination);
  }
  const CheckpointIndex& index = reader.index();
  return RestoredSteps{index.steps_completed, index.optimizer_steps, index.layout,
                       index.data_order,      index.kelvin_version,  index.run_id,
                       index.libraries,       index.loss_spike};
}

absl::Status CheckNoOtherTensors(const CheckpointReader& reader,
                                 const std::set<std::string>& job_tensors) {
  for (const std::string& name : reader.TensorNames()) {
    if (!job_tensors.count(name)) {
      const std::string ssa_settings = models::SsaSettingsThatNeed(name);
      if (!ssa_settings.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            reader.FileOf(name), " has the SSA tensor \"", name,
            "\", which this job's model does not: the checkpoint was trained with SSA; set ",
            ssa_settings, " (the flags it was trained with)"));
      }
      return absl::FailedPreconditionError(
          absl::StrCat(reader.FileOf(name), " has tensor \"", name,
                       "\", which this job's model does not: the checkpoint is of another model"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointReader> OpenJobCheckpoint(const std::string& path,
                                                   const std::string& job_name) {
  KELVIN_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(path));
  if (reader.index().job != job_name) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is a checkpoint of job \"", reader.index().job, "\", not of this job \"", job_name,
        "\": give this job its own checkpoint.dir, or set checkpoint.resume=NEVER"));
  }
  return reader;
}

absl::StatusOr<std::vector<std::string>> RemoveCheckpointLeftovers(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code error;
  if (dir.empty() || !fs::is_directory(dir, error)) return removed;
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(dir, error); !error && it != fs::directory_iterator();
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    const bool step_dir = name.starts_with("step_");
    if (step_dir && (name.ends_with(kPartialSuffix) || name.ends_with(kDeletingSuffix))) {
      leftovers.push_back(it->path());
    }
  }
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot list checkpoint directory ", dir, ": ", error.message()));
  }
  for (const fs::path& leftover : leftovers) {
    fs::remove_all(leftover, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat("cannot remove the unfinished checkpoint ",
                                                      leftover.string(), ": ", error.message()));
    }
    removed.push_back(leftover.string());
  }
  return removed;
}

absl::StatusOr<std::optional<BestCheckpoint>> FindBestCheckpoint(const std::string& dir) {
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  std::optional<BestCheckpoint> best;
  for (const auto& [step, path] : checkpoints) {
    KELVIN_ASSIGN_OR_RETURN(const CheckpointIndex index, ReadCheckpointIndex(path));
    if (index.eval_loss.has_value() && (!best.has_value() || *index.eval_loss < best->eval_loss)) {
      best = BestCheckpoint{path.string(), step, *index.eval_loss};
    }
  }
  return best;
}

absl::StatusOr<std::optional<BestCheckpoint>> PruneCheckpoints(const std::string& dir,
                                                               int keep_last, bool keep_best) {
  std::optional<BestCheckpoint> best;
  if (keep_best) {
    KELVIN_ASSIGN_OR_RETURN(best, FindBestCheckpoint(dir));
  }
  if (keep_last <= 0) return best;
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  for (const auto& [step, path] : checkpoints) {  // deletes Kelvin's own directories only
    std::error_code error;
    if (!fs::is_regular_file(path / "checkpoint.json", error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path.string(),
          " is named like a checkpoint but holds no checkpoint.json: "
          "checkpoint.keep_last deletes only Kelvin's checkpoints; move it out of checkpoint.dir"));
    }
  }
  int64_t excess = static_cast<int64_t>(checkpoints.size()) - keep_last;
  for (auto it = checkpoints.begin(); excess > 0; ++it, --excess) {
    if (best.has_value() && it->first == best->step) continue;
    KELVIN_RETURN_IF_ERROR(DeleteCheckpointDirectory(it->second));
  }
  return best;
}

}  // namespace kelvin::training
