// Convert streams a checkpoint's logical tensors into Hugging Face files; evaluate goes through
// the trainer, which restores checkpoints under any layout and evaluates on the held-out data.
#include "launcher/commands/checkpoint_commands.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/ops/elementwise.h"
#include "core/status.h"
#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/training_state.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory,
                                              const ConvertOptions& options) {
  if (job.checkpoint().dir().empty()) {
    return absl::InvalidArgumentError(
        "kelvin convert reads the job's checkpoints: set checkpoint.dir");
  }
  KELVIN_CHECK(options.dtype == DType::kF32 || options.dtype == DType::kBF16)
      << "convert writes f32 or bf16";
  KELVIN_ASSIGN_OR_RETURN(const std::optional<std::string> chosen,
                          training::ChooseCheckpoint(job.checkpoint().dir(), options.checkpoint));
  if (!chosen.has_value()) {
    return training::NoCompleteCheckpointError(job.checkpoint().dir(), ": nothing to convert");
  }
  KELVIN_ASSIGN_OR_RETURN(const training::CheckpointReader reader,
                          training::OpenJobCheckpoint(*chosen, job.name()));
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                          training::ResolveModelArchitecture(job.model()));
  KELVIN_RETURN_IF_ERROR(
      training::CheckNoOtherTensors(reader, training::CheckpointTensorNames(arch)));
  std::vector<io::HfTensorSource> tensors;  // the whole model's, in Hugging Face order
  for (const models::LlamaParameterSpec& spec :
       models::StageParameterSpecs(arch, models::StageLayoutOf(arch, 0, 1, 1))) {
    // Every tensor is checked (held whole, exactly once) before any file is written.
    KELVIN_RETURN_IF_ERROR(reader.Check(spec.name, io::TensorRegion::Whole(spec.full_shape)));
    const DType dtype = options.dtype;
    tensors.push_back(
        {spec.name, spec.full_shape, dtype, [&reader, spec, dtype]() -> absl::StatusOr<Tensor> {
           KELVIN_ASSIGN_OR_RETURN(
               const Tensor master,
               reader.Read(spec.name, io::TensorRegion::Whole(spec.full_shape)));
           if (master.dtype() == dtype) return master.View(spec.full_shape);
           Tensor converted = Tensor::Empty(spec.full_shape, dtype);
           ops::Cast(Context::Cpu(), master.View(spec.full_shape), converted);
           return converted;
         }});
  }
  models::HfExportProvenance provenance = training::ExportProvenanceOf(job);
  provenance.steps = reader.index().steps_completed;
  provenance.eval_loss = reader.index().eval_loss;  // the training loss is not in checkpoints
  KELVIN_RETURN_IF_ERROR(models::WriteHfModelDirectory(directory, arch, tensors, provenance));
  return reader.index().steps_completed;
}

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
