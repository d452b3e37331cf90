// Evaluate goes through the trainer, which restores checkpoints under any layout and evaluates on
// the held-out data.
#include "launcher/commands/eval_command.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
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

std::string FormatEvaluation(const training::EvalStats& stats) {
  std::string line =
      absl::StrFormat("loss %.9f | perplexity %.6g | token accuracy %.2f%% (%d of %d tokens)",
                      stats.loss, std::exp(stats.loss), 100 * stats.token_accuracy,
                      stats.correct_tokens, stats.labelled_tokens);
  if (stats.retrieval_accuracy >= 0) {
    absl::StrAppendFormat(&line, " | passkey retrieval %.2f%%", 100 * stats.retrieval_accuracy);
  }
  return line;
}

std::string EvaluationsJson(const config::JobConfig& job,
                            const std::vector<JobEvaluation>& evaluations) {
  const auto set = [](const std::string& name, const training::EvalStats& stats) {
    nlohmann::ordered_json result = {{"name", name},
                                     {"loss", stats.loss},
                                     {"perplexity", std::exp(stats.loss)},
                                     {"token_accuracy", stats.token_accuracy},
                                     {"labelled_tokens", stats.labelled_tokens},
                                     {"correct_tokens", stats.correct_tokens}};
    if (stats.retrieval_accuracy >= 0) result["passkey_retrieval"] = stats.retrieval_accuracy;
    return result;
  };
  nlohmann::ordered_json root = {{"job", job.name()},
                                 {"evaluations", nlohmann::ordered_json::array()}};
  for (const JobEvaluation& evaluation : evaluations) {
    nlohmann::ordered_json sets = nlohmann::ordered_json::array({set("main", evaluation.main)});
    for (const auto& [name, stats] : evaluation.also) sets.push_back(set(name, stats));
    root["evaluations"].push_back({{"step", evaluation.main.step}, {"sets", sets}});
  }
  return root.dump(2) + "\n";
}

}  // namespace kelvin::launcher
