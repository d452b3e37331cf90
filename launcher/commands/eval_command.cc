// Evaluate goes through the trainer, which restores checkpoints under any layout and evaluates on
// the held-out data.
#include "launcher/commands/eval_command.h"

#include "core/logging.h"
#include "core/status.h"

namespace kelvin::launcher {

absl::StatusOr<training::EvalStats> EvaluateJob(const config::JobConfig& job) {
  KELVIN_ASSIGN_OR_RETURN(const JobEvaluation evaluation, EvaluateJobOnEverySet(job));
  return evaluation.main;
}

namespace {

// The trainer's model, as built or restored, on the main and the data.also_eval sets.
absl::StatusOr<JobEvaluation> EvaluateModel(training::Trainer& trainer) {
  JobEvaluation evaluation;
  KELVIN_ASSIGN_OR_RETURN(evaluation.main, trainer.Evaluate(trainer.start_step()));
  KELVIN_ASSIGN_OR_RETURN(evaluation.also, trainer.EvaluateFurtherSets(trainer.start_step()));
  return evaluation;
}

// The job's trainer without resuming: chosen checkpoints are restored into it.
absl::StatusOr<std::unique_ptr<training::Trainer>> CreateWithoutResuming(
    const config::JobConfig& job) {
  config::JobConfig built = job;
  built.mutable_checkpoint()->set_resume(config::CheckpointConfig::NEVER);
  return training::Trainer::Create(built);
}

}  // namespace

absl::StatusOr<JobEvaluation> EvaluateJobOnEverySet(const config::JobConfig& job,
                                                    const training::CheckpointChoice& checkpoint) {
  if (checkpoint.newest()) {
    KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<training::Trainer> trainer,
                            training::Trainer::Create(job));
    if (trainer->start_step() == 0 && !job.model().has_hf_dir()) {
      KLOG_RANK0(WARNING) << "kelvin eval: "
                          << (job.checkpoint().dir().empty()
                                  ? std::string("the job has no checkpoint.dir")
                                  : "checkpoint.dir=\"" + job.checkpoint().dir() +
                                        "\" holds no checkpoint to restore")
                          << " and no model.hf_dir: this scores the seed's random initial weights, "
                             "not a trained model";
    }
    return EvaluateModel(*trainer);
  }
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<training::Trainer> trainer,
                          CreateWithoutResuming(job));
  KELVIN_RETURN_IF_ERROR(trainer->RestoreCheckpoint(checkpoint));
  return EvaluateModel(*trainer);
}

absl::StatusOr<std::vector<JobEvaluation>> EvaluateEveryCheckpoint(const config::JobConfig& job) {
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<training::Trainer> trainer,
                          CreateWithoutResuming(job));
  KELVIN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, trainer->CheckpointSteps());
  std::vector<JobEvaluation> evaluations;
  for (const int64_t step : steps) {
    KELVIN_RETURN_IF_ERROR(trainer->RestoreCheckpoint(training::CheckpointChoice::Step(step)));
    KELVIN_ASSIGN_OR_RETURN(JobEvaluation evaluation, EvaluateModel(*trainer));
    evaluations.push_back(std::move(evaluation));
  }
  return evaluations;
}

}  // namespace kelvin::launcher
