// Where the forward-only commands run the model and find its weights.
#include "launcher/commands/inference_model.h"

#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "models/llama/hf_weight_check.h"
#include "ssa/ssa_attention.h"
#include "training/checkpoint/checkpoint_reader.h"
#include "training/checkpoint/training_state.h"

namespace kelvin::launcher {

void AddDeviceOption(CommandLine& line, CLI::App* command, InferenceDevice& device) {
  line.AddValue(command, "--device", "cpu|cuda", "cpu or cuda",
                "cpu in f32 or cuda in bf16 (default: the job's training.device)",
                [&device](const std::string& text) {
                  bool cuda = false;
                  const std::string error = ParseDevice(text, cuda);
                  if (error.empty()) device = cuda ? InferenceDevice::kCuda : InferenceDevice::kCpu;
                  return error;
                });
}

absl::StatusOr<training::TrainingPlacement> ResolveInferencePlacement(const config::JobConfig& job,
                                                                      InferenceDevice device,
                                                                      int local_rank) {
  using config::TrainingConfig;
  const TrainingConfig::Device asked = device == InferenceDevice::kCpu    ? TrainingConfig::CPU
                                       : device == InferenceDevice::kCuda ? TrainingConfig::CUDA
                                                                          : job.training().device();
  const std::string who =
      device == InferenceDevice::kCuda ? "--device cuda" : "training.device=CUDA";
  config::JobConfig placed = job;
  placed.mutable_training()->set_device(asked);
  placed.mutable_model()->set_precision(config::ModelConfig::AUTO);  // the device's dtype
  if (asked == TrainingConfig::CUDA && !CudaAvailable()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ", but no CUDA device is usable here (", CudaUnavailableReason(),
        "): run on a machine with a GPU and a Kelvin built with CUDA (scripts/setup.sh builds "
        "with it where it finds the toolkit), or give --device cpu"));
  }
  if (asked != TrainingConfig::CPU && CudaAvailable()) {
    KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                            training::ResolveModelArchitecture(job.model()));
    if (!ssa::CudaSupportsHeadDim(arch.head_dim)) {
      const std::string why = absl::StrCat("the model's head_dim=", arch.head_dim,
                                           " is not one the CUDA attention kernels run (64, 128)");
      if (asked == TrainingConfig::CUDA) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": ", why, "; give --device cpu"));
      }
      KLOG_RANK0(INFO) << "training.device=AUTO: " << why << ", so the model runs on the CPU";
      placed.mutable_training()->set_device(TrainingConfig::CPU);
    }
  }
  return training::ResolvePlacement(placed, local_rank);
}

absl::StatusOr<std::unique_ptr<models::LlamaModel>> LoadInferenceModel(
    const config::JobConfig& job, const training::CheckpointChoice& choice,
    const training::TrainingPlacement& placement, parallel::Communicator* tp) {
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
  KLOG_RANK0(INFO) << "the model runs on " << placement.ctx.device().ToString() << " in "
                   << DTypeName(placement.dtype);
  // model.hf_dir's weights checked against the config before the model's buffers exist.
  std::optional<io::HfCheckpoint> hf_weights;
  if (!chosen.has_value()) {
    KELVIN_ASSIGN_OR_RETURN(hf_weights, models::OpenHfWeightsFor(job.model().hf_dir(), arch));
  }
  auto model = std::make_unique<models::LlamaModel>(
      arch, placement.dtype, models::LlamaParallelism{.tp = tp}, models::LlamaRecompute{},
      models::LlamaPlacement{.ctx = placement.ctx, .forward_only = true});
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
  KELVIN_RETURN_IF_ERROR(model->LoadHfCheckpoint(*hf_weights));
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
