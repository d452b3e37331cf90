// Where a forward-only model runs, its weights (a checkpoint's or model.hf_dir's) and its
// tokenizer.
#include "inference/forward_model.h"

#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "inference/checkpoint_weights.h"
#include "models/llama/hf_weight_check.h"
#include "ssa/ssa_attention.h"

namespace kelvin::inference {

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
  // A frozen-base checkpoint holds the trainable tensors alone: the base comes from the job's
  // source first (model.hf_dir, or the preset's draw from training.seed).
  const bool base_first = chosen.has_value() && arch.trainable.has_value();
  // model.hf_dir's weights checked against the config before the model's buffers exist.
  std::optional<io::HfCheckpoint> hf_weights;
  if (job.model().has_hf_dir() && (!chosen.has_value() || base_first)) {
    KELVIN_ASSIGN_OR_RETURN(hf_weights, models::OpenHfWeightsFor(job.model().hf_dir(), arch));
  }
  // No backward ever reads the layers' activations: the fields a recompute would redo share one
  // layer's buffers (a window's forward then holds one layer's activations, not every layer's).
  auto model = std::make_unique<models::LlamaModel>(
      arch, placement.dtype, models::LlamaParallelism{.tp = tp},
      models::LlamaRecompute{.attention = true, .mlp = true},
      models::LlamaPlacement{.ctx = placement.ctx, .forward_only = true});
  if (base_first && hf_weights.has_value()) {
    KELVIN_RETURN_IF_ERROR(model->LoadHfCheckpoint(*hf_weights));
  } else if (base_first) {
    model->InitRandom(job.training().seed());
  }
  if (chosen.has_value()) {
    KELVIN_RETURN_IF_ERROR(ReadCheckpointWeights(*chosen, job.name(), *model));
    KLOG_RANK0(INFO) << "the model's weights: the checkpoint " << *chosen;
    return model;
  }
  KELVIN_RETURN_IF_ERROR(model->LoadHfCheckpoint(*hf_weights));
  KLOG_RANK0(INFO) << "the model's weights: model.hf_dir=" << job.model().hf_dir();
  return model;
}

absl::StatusOr<data::Tokenizer> LoadTokenizerOfModel(const std::string& directory,
                                                     const std::string& named, int64_t vocab_size) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::path(directory) / "tokenizer.json", error)) {
    return absl::NotFoundError(absl::StrCat(
        named,
        " has no tokenizer.json: give the directory that holds the model's tokenizer.json "
        "(a Hugging Face model or tokenizer directory)"));
  }
  // Its errors name the file.
  KELVIN_ASSIGN_OR_RETURN(data::Tokenizer tokenizer, data::Tokenizer::FromDirectory(directory));
  if (tokenizer.vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        named, ": the tokenizer's ids go up to ", tokenizer.vocab_size() - 1, " (",
        tokenizer.vocab_size(), " ids), beyond the model's vocab_size=", vocab_size,
        ": its text would hold tokens the model has no embedding for; give the tokenizer the "
        "model was trained with"));
  }
  return tokenizer;
}

absl::StatusOr<std::optional<data::Tokenizer>> LoadModelTokenizer(const config::JobConfig& job,
                                                                  const std::string& tokenizer_dir,
                                                                  const std::string& needed_by,
                                                                  const std::string& instead) {
  std::error_code error;
  const bool given = !tokenizer_dir.empty();
  const bool present =
      given || (job.model().has_hf_dir() &&
                std::filesystem::exists(
                    std::filesystem::path(job.model().hf_dir()) / "tokenizer.json", error));
  if (!present) {
    if (needed_by.empty()) return std::nullopt;
    return absl::FailedPreconditionError(absl::StrCat(
        "the model's tokenizer is needed for ", needed_by, ": ",
        job.model().has_hf_dir()
            ? absl::StrCat("model.hf_dir=", job.model().hf_dir(), " has no tokenizer.json")
            : std::string("the job has no model.hf_dir"),
        "; give --tokenizer DIR, or ", instead));
  }
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                          training::ResolveModelArchitecture(job.model()));
  absl::StatusOr<data::Tokenizer> tokenizer =
      given ? LoadTokenizerOfModel(tokenizer_dir, absl::StrCat("--tokenizer ", tokenizer_dir),
                                   arch.vocab_size)
            : LoadTokenizerOfModel(job.model().hf_dir(),
                                   absl::StrCat("model.hf_dir=", job.model().hf_dir()),
                                   arch.vocab_size);
  if (tokenizer.ok()) return *std::move(tokenizer);
  if (given || !needed_by.empty()) return tokenizer.status();
  KLOG(WARNING) << tokenizer.status().message() << ": going on without the tokenizer";
  return std::nullopt;
}

}  // namespace kelvin::inference
