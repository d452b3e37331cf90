// Where the forward-only commands find their weights.
#include "launcher/commands/inference_model.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "training/checkpoint/checkpoint_reader.h"
#include "training/checkpoint/training_state.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

absl::StatusOr<std::unique_ptr<models::LlamaModel>> LoadInferenceModel(
    const config::JobConfig& job, const training::CheckpointChoice& choice,
    parallel::Communicator* tp) {
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                          training::ResolveModelArchitecture(job.model()));
  std::optional<std::string> chosen;
  if (!job.checkpoint().dir().empty()) {
    KELVIN_ASSIGN_OR_RETURN(chosen, training::ChooseCheckpoint(job.checkpoint().dir(), choice));
  } else if (!choice.newest()) {
    return absl::InvalidArgumentError("--step and --best choose a checkpoint: set checkpoint.dir");
  }
  if (!chosen.has_value() && !job.model().has_hf_dir()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model needs trained weights: ",
        job.checkpoint().dir().empty()
            ? std::string("the job has no checkpoint.dir")
            : absl::StrCat("checkpoint.dir=\"", job.checkpoint().dir(), "\" holds no checkpoint"),
        " and no model.hf_dir (a preset's random weights give noise)"));
  }
  auto model =
      std::make_unique<models::LlamaModel>(arch, DType::kF32, models::LlamaParallelism{.tp = tp});
  if (chosen.has_value()) {
    KELVIN_ASSIGN_OR_RETURN(const training::CheckpointReader reader,
                            training::OpenJobCheckpoint(*chosen, job.name()));
    KELVIN_RETURN_IF_ERROR(
        training::CheckNoOtherTensors(reader, training::CheckpointTensorNames(arch)));
    for (const ParameterSet::Entry& e : model->parameters().entries()) {
      const io::TensorRegion mine = model->RegionOf(e.name);  // the whole tensor on one rank
      KELVIN_RETURN_IF_ERROR(reader.Check(e.name, mine));
      KELVIN_ASSIGN_OR_RETURN(const Tensor weights, reader.Read(e.name, mine));
      model->parameters().Assign(e.name, weights.View(e.shape));
    }
    KLOG_RANK0(INFO) << "the model's weights: the checkpoint " << *chosen;
    return model;
  }
  KELVIN_ASSIGN_OR_RETURN(const io::HfCheckpoint checkpoint,
                          io::HfCheckpoint::Open(job.model().hf_dir()));
  KELVIN_RETURN_IF_ERROR(model->LoadHfCheckpoint(checkpoint));
  KLOG_RANK0(INFO) << "the model's weights: model.hf_dir=" << job.model().hf_dir();
  return model;
}

absl::StatusOr<std::optional<data::Tokenizer>> LoadModelTokenizer(const config::JobConfig& job,
                                                                  const std::string& needed_by,
                                                                  const std::string& instead) {
  std::error_code error;
  const bool present = job.model().has_hf_dir() &&
                       std::filesystem::exists(
                           std::filesystem::path(job.model().hf_dir()) / "tokenizer.json", error);
  if (!present) {
    if (needed_by.empty()) return std::nullopt;
    return absl::FailedPreconditionError(absl::StrCat(
        needed_by, " need the model's tokenizer: ",
        job.model().has_hf_dir()
            ? absl::StrCat("model.hf_dir=", job.model().hf_dir(), " has no tokenizer.json")
            : std::string("the job has no model.hf_dir"),
        "; ", instead));
  }
  absl::StatusOr<data::Tokenizer> tokenizer = data::Tokenizer::FromDirectory(job.model().hf_dir());
  if (tokenizer.ok()) return *std::move(tokenizer);
  if (!needed_by.empty()) return tokenizer.status();
  KLOG(WARNING) << tokenizer.status().message() << ": going on without the tokenizer";
  return std::nullopt;
}

}  // namespace kelvin::launcher
