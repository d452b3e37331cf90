// Model and data construction from the job config.
#include "training/job/job_setup.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/io/hf_checkpoint.h"
#include "core/logging.h"
#include "google/protobuf/text_format.h"
#include "models/llama/hf_weight_check.h"
#include "ssa/ssa_attention.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/job/rope_scaling_job.h"
#include "training/metrics/metrics_file.h"

namespace kelvin::training {
namespace {

void ApplyArchitectureOverrides(const config::Architecture& a, models::LlamaConfig& c) {
  if (a.has_hidden_size()) c.hidden_size = a.hidden_size();
  if (a.has_intermediate_size()) c.intermediate_size = a.intermediate_size();
  if (a.has_num_layers()) c.num_layers = a.num_layers();
  if (a.has_num_attention_heads()) c.num_attention_heads = a.num_attention_heads();
  if (a.has_num_key_value_heads()) c.num_key_value_heads = a.num_key_value_heads();
  if (a.has_vocab_size()) c.vocab_size = a.vocab_size();
  if (a.has_max_position_embeddings()) c.max_position_embeddings = a.max_position_embeddings();
  if (a.has_rope_theta()) c.rope.theta = a.rope_theta();
  if (a.has_rms_norm_eps()) c.rms_norm_eps = a.rms_norm_eps();
  if (a.has_tie_word_embeddings()) c.tie_word_embeddings = a.tie_word_embeddings();
  if (a.has_hidden_size() || a.has_num_attention_heads()) {
    c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  }
  if (a.has_rope_scaling()) {
    std::vector<std::string> problems;  // none: ValidateJobConfig has reported them
    const int64_t source_max_position = c.max_position_embeddings;
    c.rope = RopeConfigFromJob(a.rope_scaling(), c.rope.theta, problems);
    KELVIN_CHECK(problems.empty()) << problems.front();
    // Dynamic NTK's original length is max_position_embeddings; it scales beyond it per call.
    if (c.rope.type == ops::RopeType::kDynamic) c.rope.original_max_position = source_max_position;
    // The extended length, so that one override extends a model (and its export says so).
    if (!a.has_max_position_embeddings() && c.rope.type != ops::RopeType::kDefault &&
        c.rope.type != ops::RopeType::kDynamic) {
      const double base = c.rope.type == ops::RopeType::kLinear
                              ? static_cast<double>(source_max_position)
                              : static_cast<double>(c.rope.original_max_position);
      c.max_position_embeddings = std::llround(base * c.rope.factor);
    }
  }
}

std::string ClampText(const std::optional<ssa::TemperatureClamp>& clamp) {
  return clamp.has_value() ? absl::StrCat("[", clamp->lo, ", ", clamp->hi, "]") : "none";
}

// The SSA of the job's model: model.ssa when the job enables it, else that of an SSA export in
// model.hf_dir (its config.json's "ssa"), so that fine-tuning an export further repeats no flags
// (model.ssa.enabled is false when the job does not mention SSA: a loaded job's section exists
// with its defaults). What shapes the model (which temperatures, their terms, weight sharing, the
// clamp) must agree with the directory's; alpha_init and temperature_lr_scale only steer training,
// and the job's win (choice: the directory records the values that trained it, not a contract).
absl::Status ResolveSsa(const config::ModelConfig& model, models::LlamaConfig& arch) {
  const std::optional<ssa::SsaOptions> exported = arch.ssa;
  if (!model.ssa().enabled()) {
    if (exported.has_value()) {
      KLOG_RANK0(INFO) << "model.hf_dir=" << model.hf_dir()
                       << " is an SSA model: its config.json's \"ssa\" settings apply";
    }
    return absl::OkStatus();  // the directory's, or none
  }
  arch.ssa = SsaOptionsFromConfig(model.ssa());
  if (!exported.has_value()) return absl::OkStatus();
  const std::string directory =
      absl::StrCat("model.hf_dir=", model.hf_dir(), " (its config.json \"ssa\")");
  std::vector<std::string> contradictions;
  const auto compare = [&](const char* field, bool job_value, bool directory_value) {
    if (job_value != directory_value) {
      contradictions.push_back(absl::StrCat("model.ssa.", field, "=", job_value ? "true" : "false",
                                            " but the directory has ",
                                            directory_value ? "true" : "false"));
    }
  };
  const ssa::SsaOptions& job = *arch.ssa;
  compare("query_temperature", job.query_temperature, exported->query_temperature);
  compare("value_temperature", job.value_temperature, exported->value_temperature);
  compare("token_aware", job.token_aware, exported->token_aware);
  compare("position_aware", job.position_aware, exported->position_aware);
  compare("weight_sharing", job.weight_sharing, exported->weight_sharing);
  if (job.temperature_clamp != exported->temperature_clamp) {
    contradictions.push_back(
        absl::StrCat("model.ssa.temperature_clamp=", ClampText(job.temperature_clamp),
                     " but the directory has ", ClampText(exported->temperature_clamp)));
  }
  if (contradictions.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model.ssa contradicts ", directory, ": ", absl::StrJoin(contradictions, "; "),
      ". Remove the model.ssa section to use the directory's SSA, or set the same flags"));
}

// model.lora and model.peft (ValidateJobConfig checked the fields alone) into the architecture,
// with the rules that need it: SSA on (the job's or the directory's) for model.peft.ssa, and a
// rank no larger than the smaller side of each targeted projection.
absl::Status ResolvePeft(const config::ModelConfig& model, models::LlamaConfig& arch) {
  if (model.has_peft()) {
    const config::PeftConfig& peft = model.peft();
    if (peft.ssa() && !arch.ssa.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.peft.ssa=true but the model has no SSA (neither model.ssa.enabled nor an SSA "
          "export in model.hf_dir): turn SSA on, or set model.peft.ssa to false"));
    }
    arch.trainable = models::TrainableSets{.adapters = peft.adapters(),
                                           .ssa = peft.ssa(),
                                           .norms = peft.norms(),
                                           .embeddings = peft.embeddings()};
  }
  if (!model.has_lora()) return absl::OkStatus();
  const config::LoraConfig& lora = model.lora();
  models::LoraOptions options;
  options.rank = lora.rank();
  options.alpha = lora.has_alpha() ? lora.alpha() : static_cast<double>(lora.rank());
  options.rslora = lora.rslora();
  options.dropout = lora.dropout();
  for (const std::string& name : lora.targets()) {
    options.targets.push_back(*models::LoraTargetNamed(name));  // validated
  }
  std::sort(options.targets.begin(), options.targets.end());
  for (const models::LoraParameterSpec& spec : models::LoraLayerParameters(
           options, arch.hidden_size, arch.q_size(), arch.kv_size(), arch.intermediate_size)) {
    const int64_t side = spec.is_a ? spec.shape[1] : spec.shape[0];
    if (lora.rank() > side) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora.rank=", lora.rank(), " exceeds the ", side, " features of ",
                       models::LoraTargetName(spec.target), ": give a rank of at most ", side));
    }
  }
  arch.lora = options;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<models::LlamaConfig> ResolveModelArchitecture(const config::ModelConfig& model) {
  models::LlamaConfig arch;
  if (model.has_hf_dir()) {
    KELVIN_ASSIGN_OR_RETURN(arch, models::LlamaConfigFromHfDirectory(model.hf_dir()));
  } else {
    KELVIN_ASSIGN_OR_RETURN(arch, models::LlamaPreset(model.preset()));
  }
  ApplyArchitectureOverrides(model.architecture(), arch);
  KELVIN_RETURN_IF_ERROR(ResolveSsa(model, arch));
  KELVIN_RETURN_IF_ERROR(ResolvePeft(model, arch));
  const std::string source =
      absl::StrCat(model.has_hf_dir() ? absl::StrCat(model.hf_dir(), "/config.json")
                                      : absl::StrCat("model.preset=", model.preset()),
                   model.has_architecture() ? " with model.architecture" : "");
  KELVIN_RETURN_IF_ERROR(models::ValidateLlamaConfig(arch, source));
  return arch;
}

absl::StatusOr<models::LlamaConfig> ResolveArchitectureToPlan(const config::ModelConfig& model,
                                                              std::string& note) {
  absl::StatusOr<models::LlamaConfig> arch = ResolveModelArchitecture(model);
  if (arch.ok() || !model.has_hf_dir() || !absl::IsNotFound(arch.status())) return arch;
  const std::string directory = std::filesystem::path(model.hf_dir()).filename().string();
  const std::optional<std::string> preset = models::LlamaPresetNamedIn(
      directory.empty() ? std::filesystem::path(model.hf_dir()).parent_path().filename().string()
                        : directory);
  if (!preset.has_value()) {
    return absl::NotFoundError(absl::StrCat(arch.status().message(),
                                            ". Planning needs only the architecture: add --set "
                                            "model.preset=NAME (one of ",
                                            absl::StrJoin(models::LlamaPresetNames(), ", "),
                                            ") for the model in model.hf_dir"));
  }
  config::ModelConfig stand_in = model;
  stand_in.set_preset(*preset);
  note = absl::StrCat("model.hf_dir=", model.hf_dir(),
                      " is not readable here: planning with the preset ", *preset,
                      ", which its name names (add --set model.preset=", *preset,
                      " to choose it, or plan where the weights are)");
  return ResolveModelArchitecture(stand_in);
}

namespace {

// The last component of `path` ("/data/web/train.int32" -> "train.int32"; "/models/Llama/" ->
// "Llama").
std::string FileNameOf(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  return p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
}

// Every path of `message` (the string fields named path, path_prefix, ...) cut to its file name:
// a model card names its data without publishing the directories of the machine that trained it.
void KeepFileNames(google::protobuf::Message& message) {
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      const int count = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
      for (int i = 0; i < count; ++i) {
        KeepFileNames(field->is_repeated() ? *reflection.MutableRepeatedMessage(&message, field, i)
                                           : *reflection.MutableMessage(&message, field));
      }
    } else if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING &&
               !field->is_repeated() &&
               (absl::EndsWith(field->name(), "path") ||
                absl::EndsWith(field->name(), "path_prefix"))) {
      reflection.SetString(&message, field, FileNameOf(reflection.GetString(message, field)));
    }
  }
}

}  // namespace

models::HfExportProvenance ExportProvenanceOf(const config::JobConfig& job) {
  models::HfExportProvenance provenance;
  const config::ModelConfig& model = job.model();
  provenance.source = model.has_hf_dir() ? absl::StrCat("model.hf_dir=", FileNameOf(model.hf_dir()))
                                         : absl::StrCat("model.preset=", model.preset());
  if (model.has_hf_dir()) provenance.source_dir = model.hf_dir();
  provenance.job_name = job.name();
  config::DataConfig data = job.data();
  KeepFileNames(data);
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  printer.PrintToString(data, &provenance.data);
  while (!provenance.data.empty() && provenance.data.back() == ' ') provenance.data.pop_back();
  return provenance;
}

ssa::SsaOptions SsaOptionsFromConfig(const config::SsaConfig& ssa) {
  ssa::SsaOptions options;
  options.query_temperature = ssa.query_temperature();
  options.value_temperature = ssa.value_temperature();
  options.token_aware = ssa.token_aware();
  options.position_aware = ssa.position_aware();
  options.weight_sharing = ssa.weight_sharing();
  options.alpha_init = ssa.alpha_init();
  if (ssa.has_temperature_clamp()) {
    options.temperature_clamp =
        ssa::TemperatureClamp{ssa.temperature_clamp().lo(), ssa.temperature_clamp().hi()};
  }
  options.temperature_lr_scale = ssa.temperature_lr_scale();
  return options;
}

absl::Status CheckDirectoryCanBeWritten(const std::string& field, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path at = fs::absolute(path, error);
  const auto refuse = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(field, "=\"", path, "\": ", why));
  };
  bool itself = true;  // `at` is the path itself, not an ancestor
  while (!fs::exists(at, error) && at.has_parent_path() && at != at.parent_path()) {
    at = at.parent_path();
    itself = false;
  }
  if (!fs::is_directory(at, error)) {
    return refuse(
        itself ? "is a file, not a directory"
               : absl::StrCat("cannot be created: ", at.string(), " is a file, not a directory"));
  }
  // A file made and removed again, not access(): root passes access() everywhere, and /proc or a
  // read-only mount refuse only the write itself.
  std::string probe = (at / ".kelvin-write-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    return refuse(
        itself ? absl::StrCat("cannot be written (", why, "): choose a directory you can write to")
               : absl::StrCat("cannot be created: ", at.string(), " cannot be written (", why,
                              "); choose a directory you can write to"));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

namespace {

// The filesystem root: a run's outputs would be written straight into it.
bool IsFilesystemRoot(const std::string& path) {
  std::error_code error;
  const std::filesystem::path at = std::filesystem::absolute(path, error).lexically_normal();
  return !error && at == at.root_path();
}

// `a` and `b` name the same directory (lexically, or the same inode where both exist).
bool SameDirectory(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto normal = [](const std::string& path) {
    std::error_code ignored;
    fs::path at = fs::absolute(path, ignored).lexically_normal();
    return at.has_filename() ? at : at.parent_path();  // no trailing separator
  };
  return normal(a) == normal(b) || fs::equivalent(a, b, error);
}

// The checkpoint directory of `checkpoint_dir` that `path` lies in (step_<N> or its .partial, at
// any depth below it), or "" where it lies in none.
std::string CheckpointHolding(const std::string& path, const std::string& checkpoint_dir) {
  namespace fs = std::filesystem;
  const auto resolved = [](const std::string& p) {  // symbolic links followed where they exist
    std::error_code error;
    fs::path at = fs::weakly_canonical(fs::absolute(p, error).lexically_normal(), error);
    return error ? fs::path() : at;
  };
  const fs::path at = resolved(path), dir = resolved(checkpoint_dir);
  if (at.empty() || dir.empty()) return "";
  const fs::path inside = at.lexically_relative(dir);
  if (inside.empty() || *inside.begin() == "..") return "";
  std::string first = inside.begin()->string();
  const std::string step = first.ends_with(".partial") ? fs::path(first).stem().string() : first;
  return StepOfDirectoryName(step).has_value() ? first : "";
}

}  // namespace

absl::Status CheckOutputLocations(const config::JobConfig& job) {
  for (const auto& [field, path] :
       {std::pair{"checkpoint.dir", job.checkpoint().dir()},
        std::pair{"training.export_hf_dir", job.training().export_hf_dir()},
        std::pair{"logging.tensorboard_dir", job.logging().tensorboard_dir()},
        std::pair{"launch.run_dir", job.launch().run_dir()}}) {
    if (path.empty()) continue;
    if (IsFilesystemRoot(path)) {
      return absl::FailedPreconditionError(absl::StrCat(
          field, "=\"", path, "\": is the filesystem root; give the run a directory of its own"));
    }
    KELVIN_RETURN_IF_ERROR(CheckDirectoryCanBeWritten(field, path));
  }
  const std::string& export_dir = job.training().export_hf_dir();
  if (!export_dir.empty()) {
    KELVIN_ASSIGN_OR_RETURN(
        const models::ExportFormat format,
        ResolveExportFormat(job, job.training().export_format(), "training.export_format"));
    KELVIN_RETURN_IF_ERROR(CheckExportDirectory(
        absl::StrCat("training.export_hf_dir=\"", export_dir, "\""), export_dir, job, format));
  }
  const std::string& metrics = job.logging().metrics_file();
  if (metrics.empty()) return absl::OkStatus();
  std::error_code error;
  if (std::filesystem::is_directory(metrics, error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "logging.metrics_file=\"", metrics, "\": is a directory; give the path of a file"));
  }
  KELVIN_RETURN_IF_ERROR(CheckIsMetricsFile(metrics));  // before a batch job is queued
  const std::filesystem::path parent = std::filesystem::path(metrics).parent_path();
  return CheckDirectoryCanBeWritten("logging.metrics_file", parent.empty() ? "." : parent.string());
}

absl::Status CheckExportDirectory(const std::string& label, const std::string& directory,
                                  const config::JobConfig& job, models::ExportFormat format) {
  if (IsFilesystemRoot(directory)) {
    return absl::FailedPreconditionError(
        absl::StrCat(label, ": is the filesystem root; give the model a directory of its own"));
  }
  if (job.model().has_hf_dir() && SameDirectory(directory, job.model().hf_dir())) {
    return absl::FailedPreconditionError(absl::StrCat(
        label, " is model.hf_dir=\"", job.model().hf_dir(),
        "\": the export would replace the model this job starts from; export to another "
        "directory"));
  }
  if (const std::string& checkpoints = job.checkpoint().dir(); !checkpoints.empty()) {
    if (const std::string holding = CheckpointHolding(directory, checkpoints); !holding.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          label, " is inside the checkpoint ", holding, " of checkpoint.dir=\"", checkpoints,
          "\": checkpoint.keep_last and keep_best delete that directory with the export in it; "
          "export beside the checkpoints (e.g. ",
          (std::filesystem::path(checkpoints) / "hf").string(), ")"));
    }
  }
  return models::CheckExportTarget(label, directory, format);
}

absl::StatusOr<models::ExportFormat> ResolveExportFormat(const config::JobConfig& job,
                                                         config::ExportFormat::Format requested,
                                                         const std::string& label) {
  const bool lora = job.model().has_lora();
  switch (requested) {
    case config::ExportFormat::MERGED:
      return models::ExportFormat::kMerged;
    case config::ExportFormat::PEFT_ADAPTER:
      if (lora) return models::ExportFormat::kPeftAdapter;
      return absl::InvalidArgumentError(absl::StrCat(
          label,
          "=PEFT_ADAPTER needs LoRA adapters (model.lora): peft refuses an adapter that "
          "adapts no projection, so a job without them (SSA-only tuning, norms, embeddings, a "
          "full fine-tune) exports the whole model; use MERGED (or AUTO), or add model.lora"));
    default:
      return lora ? models::ExportFormat::kPeftAdapter : models::ExportFormat::kMerged;
  }
}

absl::Status CheckSequenceLength(const config::JobConfig& job, const models::LlamaConfig& arch) {
  if (arch.rope.type == ops::RopeType::kDynamic) {
    return absl::InvalidArgumentError(
        "the model's rope_type \"dynamic\" (NTK) is applied at inference only: its frequencies "
        "change with each forward call's length, as transformers recomputes them, so no training "
        "step would match what inference computes; train with \"yarn\" or \"linear\" "
        "(model.architecture.rope_scaling) or a larger rope_theta");
  }
  if (job.training().seq_length() <= arch.max_position_embeddings) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("training.seq_length=", job.training().seq_length(),
                   " exceeds the model's max_position_embeddings=", arch.max_position_embeddings));
}

absl::StatusOr<DType> ResolveModelDType(const config::JobConfig& job, bool cuda) {
  const config::ModelConfig::Precision precision = job.model().precision();
  if (cuda && precision == config::ModelConfig::FP32) {
    return absl::InvalidArgumentError(
        "model.precision=FP32 with training on CUDA: the fused SSA attention kernel runs in bf16; "
        "use BF16 (f32 master weights and gradients) or AUTO, or training.device=CPU for f32");
  }
  if (!cuda && precision == config::ModelConfig::BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.precision=BF16 with training on the CPU (training.device=",
                     config::TrainingConfig::Device_Name(job.training().device()),
                     "): the CPU kernels run in f32; use FP32 or AUTO, or train on a CUDA device"));
  }
  return cuda ? DType::kBF16 : DType::kF32;
}

absl::StatusOr<TrainingPlacement> ResolvePlacement(const config::JobConfig& job, int local_rank) {
  const config::TrainingConfig::Device device = job.training().device();
  if (device == config::TrainingConfig::CUDA && !CudaAvailable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("training.device=CUDA, but no CUDA device is usable here (",
                     CudaUnavailableReason(), "); use AUTO or CPU to train on the CPU"));
  }
  const bool cuda = device == config::TrainingConfig::CUDA ||
                    (device == config::TrainingConfig::AUTO && CudaAvailable());
  KELVIN_ASSIGN_OR_RETURN(const DType dtype, ResolveModelDType(job, cuda));
  if (!cuda) return TrainingPlacement{};
  return TrainingPlacement{Context::Cuda(local_rank % CudaDeviceCount()), dtype};
}

ssa::AttentionBackend AttentionBackendOf(const config::JobConfig& job) {
  switch (job.model().attention_backend()) {
    case config::AttentionBackend::FUSED:
      return ssa::AttentionBackend::kFused;
    case config::AttentionBackend::CUDNN:
      return ssa::AttentionBackend::kCudnn;
    default:
      return ssa::AttentionBackend::kAuto;
  }
}

absl::StatusOr<ssa::AttentionBackend> AttentionBackendFor(const config::JobConfig& job,
                                                          const Context& ctx) {
  const ssa::AttentionBackend backend = AttentionBackendOf(job);
  if (backend != ssa::AttentionBackend::kCudnn) return backend;
  if (!ctx.is_cuda()) {
    return absl::FailedPreconditionError(
        "model.attention_backend=CUDNN runs on CUDA only, but this job runs on the CPU "
        "(training.device=AUTO found no usable GPU): use AUTO or FUSED, or run where a GPU is");
  }
  const std::string unavailable = ssa::CudnnCoreUnavailableReason(ctx);
  if (!unavailable.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model.attention_backend=CUDNN, but the cuDNN attention core cannot run on ",
                     ctx.device().ToString(), ": ", unavailable, "; use AUTO or FUSED"));
  }
  return backend;
}

absl::StatusOr<std::unique_ptr<models::LlamaModel>> BuildModel(
    const config::JobConfig& job, const models::LlamaConfig& arch,
    const models::LlamaParallelism& parallelism, const TrainingPlacement& placement,
    int64_t gradient_shards) {
  const models::LlamaRecompute recompute{job.model().recompute_attention(),
                                         job.model().recompute_mlp()};
  KELVIN_ASSIGN_OR_RETURN(const ssa::AttentionBackend backend,
                          AttentionBackendFor(job, placement.ctx));
  // The weights' shapes are checked against the config before the model's buffers exist.
  std::optional<io::HfCheckpoint> checkpoint;
  if (job.model().has_hf_dir()) {
    KELVIN_ASSIGN_OR_RETURN(checkpoint, models::OpenHfWeightsFor(job.model().hf_dir(), arch));
  }
  auto model = std::make_unique<models::LlamaModel>(
      arch, placement.dtype, parallelism, recompute,
      models::LlamaPlacement{.ctx = placement.ctx,
                             .separate_master = placement.separate_master,
                             .gradient_shards = gradient_shards,
                             .attention_backend = backend});
  if (checkpoint.has_value()) {
    KELVIN_RETURN_IF_ERROR(model->LoadHfCheckpoint(*checkpoint));
    model->InitLoraParameters(job.training().seed());
  } else {
    model->InitRandom(job.training().seed());
  }
  return model;
}

}  // namespace kelvin::training
