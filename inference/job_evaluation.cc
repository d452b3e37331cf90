// The job's forward-only model built once, the chosen checkpoints' weights read into it, and the
// held-out evaluation run on it.
#include "inference/job_evaluation.h"

#include <omp.h>

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "inference/job_forward_model.h"
#include "training/checkpoint/agreed_checkpoint.h"
#include "training/job/data_sources.h"
#include "training/job/job_setup.h"

namespace kelvin::inference {
namespace {

// The job's forward-only model and held-out data, and the evaluation that scores one on the other.
class EvaluatedJob {
 public:
  static absl::StatusOr<std::unique_ptr<EvaluatedJob>> Build(const config::JobConfig& job,
                                                             MPI_Comm world) {
    if (job.training().threads() > 0) omp_set_num_threads(job.training().threads());
    KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                            training::ResolveModelArchitecture(job.model()));
    KELVIN_RETURN_IF_ERROR(training::CheckSequenceLength(job, arch));
    std::unique_ptr<EvaluatedJob> built(new EvaluatedJob(job));
    KELVIN_ASSIGN_OR_RETURN(built->model_, JobForwardModel::Build(job, arch, world));
    KELVIN_ASSIGN_OR_RETURN(built->data_, training::BuildDataSources(job, arch));
    built->evaluation_ =
        std::make_unique<HeldOutEvaluation>(built->job_, built->model_->scored(), built->data_);
    return built;
  }

  JobForwardModel& model() { return *model_; }

  // The weights of the checkpoint at `path`, then every held-out set at its step.
  absl::StatusOr<JobEvaluation> EvaluateCheckpoint(const std::string& path) {
    KELVIN_RETURN_IF_ERROR(model_->ReadWeights(path));
    KLOG_RANK0(INFO) << "the model's weights: the checkpoint " << path;
    return Evaluate(training::CheckpointStepOf(path).value_or(0));
  }

  // The model as it is, labelled `step`.
  absl::StatusOr<JobEvaluation> Evaluate(int64_t step) {
    JobEvaluation evaluation;
    KELVIN_ASSIGN_OR_RETURN(evaluation.main, evaluation_->Evaluate(step));
    KELVIN_ASSIGN_OR_RETURN(evaluation.also, evaluation_->EvaluateFurtherSets(step));
    return evaluation;
  }

 private:
  explicit EvaluatedJob(const config::JobConfig& job) : job_(job) {}

  config::JobConfig job_;
  std::unique_ptr<JobForwardModel> model_;
  training::DataSources data_;
  std::unique_ptr<HeldOutEvaluation> evaluation_;
};

// The checkpoint of checkpoint.dir the job would resume from (checkpoint.resume), nullopt for none.
absl::StatusOr<std::optional<std::string>> ResumedCheckpoint(const config::JobConfig& job,
                                                             parallel::Communicator& world) {
  const config::CheckpointConfig& c = job.checkpoint();
  if (c.dir().empty() || c.resume() == config::CheckpointConfig::NEVER) return std::nullopt;
  KELVIN_ASSIGN_OR_RETURN(const std::optional<std::string> latest,
                          training::AgreedCheckpoint(world, c.dir(), {}));
  if (!latest.has_value() && c.resume() == config::CheckpointConfig::REQUIRED) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint.resume=REQUIRED but checkpoint.dir=\"", c.dir(),
        "\" holds no complete checkpoint (step_<N> directories); use AUTO to start afresh"));
  }
  return latest;
}

}  // namespace

absl::StatusOr<JobEvaluation> EvaluateJobOnEverySet(const config::JobConfig& job,
                                                    const training::CheckpointChoice& checkpoint,
                                                    MPI_Comm world) {
  const std::string& dir = job.checkpoint().dir();
  if (!checkpoint.newest() && dir.empty()) {
    return absl::InvalidArgumentError(
        "restoring a chosen checkpoint (kelvin eval --step / --best) reads the job's "
        "checkpoints: set checkpoint.dir");
  }
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<EvaluatedJob> evaluated,
                          EvaluatedJob::Build(job, world));
  parallel::Communicator& ranks = evaluated->model().grid().world();
  if (!checkpoint.newest()) {
    KELVIN_ASSIGN_OR_RETURN(const std::optional<std::string> chosen,
                            training::AgreedCheckpoint(ranks, dir, checkpoint));
    if (!chosen.has_value())
      return training::NoCompleteCheckpointError(dir, ": nothing to restore");
    return evaluated->EvaluateCheckpoint(*chosen);
  }
  KELVIN_ASSIGN_OR_RETURN(const std::optional<std::string> resumed, ResumedCheckpoint(job, ranks));
  if (resumed.has_value()) return evaluated->EvaluateCheckpoint(*resumed);
  if (!job.model().has_hf_dir()) {
    KLOG_RANK0(WARNING) << "kelvin eval: "
                        << (dir.empty()
                                ? std::string("the job has no checkpoint.dir")
                                : "checkpoint.dir=\"" + dir + "\" holds no checkpoint to restore")
                        << " and no model.hf_dir: this scores the seed's random initial weights, "
                           "not a trained model";
  }
  return evaluated->Evaluate(0);
}

absl::StatusOr<EvalStats> EvaluateJob(const config::JobConfig& job, MPI_Comm world) {
  KELVIN_ASSIGN_OR_RETURN(const JobEvaluation evaluation, EvaluateJobOnEverySet(job, {}, world));
  return evaluation.main;
}

absl::StatusOr<std::vector<JobEvaluation>> EvaluateEveryCheckpoint(const config::JobConfig& job,
                                                                   MPI_Comm world) {
  const std::string& dir = job.checkpoint().dir();
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        "kelvin eval --all reads the job's checkpoints: set checkpoint.dir");
  }
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<EvaluatedJob> evaluated,
                          EvaluatedJob::Build(job, world));
  parallel::Communicator& ranks = evaluated->model().grid().world();
  KELVIN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps,
                          training::AgreedCheckpointSteps(ranks, dir, ": nothing to evaluate"));
  std::vector<JobEvaluation> evaluations;
  for (const int64_t step : steps) {
    KELVIN_ASSIGN_OR_RETURN(
        const std::optional<std::string> path,
        training::AgreedCheckpoint(ranks, dir, training::CheckpointChoice::Step(step)));
    KELVIN_ASSIGN_OR_RETURN(JobEvaluation evaluation, evaluated->EvaluateCheckpoint(*path));
    evaluations.push_back(std::move(evaluation));
  }
  return evaluations;
}

}  // namespace kelvin::inference
