// Convert and evaluate through the trainer: it already restores checkpoints under any layout,
// gathers the model for export and evaluates on the held-out data.
#include "launcher/checkpoint_commands.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace kelvin::launcher {

absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory) {
  if (job.checkpoint().dir().empty()) {
    return absl::InvalidArgumentError(
        "kelvin convert reads the job's checkpoints: set checkpoint.dir");
  }
  config::JobConfig restoring = job;
  restoring.mutable_checkpoint()->set_resume(config::CheckpointConfig::REQUIRED);
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<Trainer> trainer, Trainer::Create(restoring));
  KELVIN_RETURN_IF_ERROR(trainer->ExportHf(directory));
  return trainer->start_step();
}

absl::StatusOr<EvalStats> EvaluateJob(const config::JobConfig& job) {
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<Trainer> trainer, Trainer::Create(job));
  return trainer->Evaluate(trainer->start_step());
}

}  // namespace kelvin::launcher
