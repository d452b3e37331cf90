// Semantic checks of a JobConfig, one function per section, every problem collected so that the
// user fixes a job in one pass. Non-finite numbers and unknown enum numbers are caught generically
// by walking the message; the per-section rules then skip non-finite values.
#include "launcher/config/job_config_validation.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/strings/did_you_mean.h"
#include "data/tasks/passkey_task.h"
#include "launcher/config/job_config.h"
#include "models/llama/llama_config.h"
#include "ssa/ssa_options.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/job/job_setup.h"
#include "training/job/rope_scaling_job.h"

namespace kelvin::launcher {
namespace {

namespace pb = ::google::protobuf;

class Problems {
 public:
  template <typename... Parts>
  void Add(const Parts&... parts) {
    lines_.push_back(absl::StrCat(parts...));
  }

  absl::Status ToStatus() const {
    if (lines_.empty()) return absl::OkStatus();
    if (lines_.size() == 1) return absl::InvalidArgumentError("invalid job config: " + lines_[0]);
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid job config (", lines_.size(), " problems):\n  ", absl::StrJoin(lines_, "\n  ")));
  }

 private:
  std::vector<std::string> lines_;
};

// The training sizes' upper limits (the model's are in models/llama/llama_config.h).
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxBatchSequences = int64_t{1} << 24;    // micro and global batch, accumulation
constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 32;  // micro_batch_size x seq_length
constexpr int64_t kMaxEvalSteps = int64_t{1} << 20;
constexpr int64_t kMaxThreads = 4096;

// Rules shared by many fields. Non-finite doubles were reported by CheckNumbersAndEnums.
void AtLeast(Problems& problems, const std::string& path, int64_t value, int64_t minimum) {
  if (value < minimum) problems.Add(path, "=", value, ": must be >= ", minimum);
}

// minimum <= value <= maximum: the limits that keep sizes and loops bounded.
void InIntRange(Problems& problems, const std::string& path, int64_t value, int64_t minimum,
                int64_t maximum) {
  if (value < minimum || value > maximum) {
    problems.Add(path, "=", value, ": must be in [", minimum, ", ", maximum, "]");
  }
}

void Positive(Problems& problems, const std::string& path, double value) {
  if (std::isfinite(value) && !(value > 0)) problems.Add(path, "=", value, ": must be > 0");
}

void NonNegative(Problems& problems, const std::string& path, double value) {
  if (std::isfinite(value) && value < 0) problems.Add(path, "=", value, ": must be >= 0");
}

// lo <= value < hi (or <= hi when `hi_inclusive`).
void InRange(Problems& problems, const std::string& path, double value, double lo, double hi,
             bool hi_inclusive) {
  if (!std::isfinite(value)) return;
  if (value < lo || value > hi || (!hi_inclusive && value == hi)) {
    problems.Add(path, "=", value, ": must be in [", lo, ", ", hi, hi_inclusive ? "]" : ")");
  }
}

std::optional<int64_t> CheckedProduct(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// A double of the job (`value` of `field`, at `path`): finite and within the field's (range)
// option.
void CheckNumber(const pb::FieldDescriptor& field, double value, const std::string& path,
                 Problems& problems) {
  if (!std::isfinite(value)) {
    problems.Add(path, "=", value, ": must be a finite number");
  } else if (field.options().HasExtension(config::range)) {
    const config::NumberRange& range = field.options().GetExtension(config::range);
    if (!(value >= range.min() && value <= range.max())) {
      problems.Add(path, "=", value, ": must be in [", range.min(), ", ", range.max(),
                   "], the range in which it makes physical sense (kelvin.proto says why)");
    }
  }
}

// Every double of the job is finite and within its field's (range) option, every enum holds a
// named value (proto3 enums accept any number in text format). The schema's repeated fields are
// strings, doubles or messages.
void CheckNumbersAndEnums(const pb::Message& message, const std::string& path, Problems& problems) {
  const pb::Reflection& reflection = *message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    const std::string field_path = path.empty() ? field->name() : path + "." + field->name();
    // Strings (launch.*), doubles (model.architecture.rope_scaling's factor lists) or messages
    // (data.blend.corpora).
    if (field->is_repeated()) {
      KELVIN_CHECK(field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING ||
                   field->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE ||
                   field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE)
          << "check repeated field " << field->full_name();
      for (int i = 0; i < reflection.FieldSize(message, field); ++i) {
        const std::string element_path = absl::StrCat(field_path, "[", i, "]");
        if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
          CheckNumber(*field, reflection.GetRepeatedDouble(message, field, i), element_path,
                      problems);
        } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
          CheckNumbersAndEnums(reflection.GetRepeatedMessage(message, field, i), element_path,
                               problems);
        }
      }
      continue;
    }
    switch (field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        CheckNumbersAndEnums(reflection.GetMessage(message, field), field_path, problems);
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        CheckNumber(*field, reflection.GetDouble(message, field), field_path, problems);
        break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT:
        CheckNumber(*field, reflection.GetFloat(message, field), field_path, problems);
        break;
      case pb::FieldDescriptor::CPPTYPE_ENUM: {
        const int number = reflection.GetEnumValue(message, field);
        if (field->enum_type()->FindValueByNumber(number) == nullptr) {
          std::vector<std::string> names;
          for (int i = 0; i < field->enum_type()->value_count(); ++i) {
            names.push_back(field->enum_type()->value(i)->name());
          }
          problems.Add(field_path, "=", number, ": not a value of ", field->enum_type()->name(),
                       "; use one of ", absl::StrJoin(names, ", "));
        }
        break;
      }
      default:
        break;
    }
  }
}

void CheckName(const config::JobConfig& job, Problems& problems) {
  if (job.name().empty()) {
    problems.Add("name is empty: set name (letters, digits, '.', '_', '-')");
    return;
  }
  // A file name holds at most 255 bytes: the name with ".sbatch" after it must fit.
  constexpr size_t kMaxNameLength = 200;
  if (job.name().size() > kMaxNameLength) {
    problems.Add("name=\"", absl::CHexEscape(job.name().substr(0, 40)), "...\" is ",
                 job.name().size(), " characters long: at most ", kMaxNameLength,
                 " (it names files, directories and SLURM jobs)");
    return;
  }
  const bool plain = std::all_of(job.name().begin(), job.name().end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  // The name is one path component (runs/<name>, <name>.sbatch): "." and ".." would be the run
  // directory's parent or its parent's parent.
  if (!plain || job.name() == "." || job.name() == "..") {
    problems.Add("name=\"", absl::CHexEscape(job.name()),
                 "\": use only letters, digits, '.', '_' and '-', and not \".\" or \"..\" (it "
                 "names files, directories and SLURM jobs)");
  }
}

void CheckRopeScaling(const config::Architecture& arch, Problems& problems) {
  std::vector<std::string> found;  // the message's shape, then the value rules config.json meets
  const ops::RopeConfig rope = training::RopeConfigFromJob(
      arch.rope_scaling(), arch.has_rope_theta() ? arch.rope_theta() : 10000.0, found);
  if (found.empty()) {
    found = models::RopeScalingProblems(rope, /*head_dim=*/0, "model.architecture.rope_scaling");
  }
  for (const std::string& problem : found) problems.Add(problem);
}

void CheckArchitecture(const config::Architecture& arch, Problems& problems) {
  const std::string path = "model.architecture.";
  // The limits of models/llama/llama_config.h, which config.json's values meet too.
  const auto size = [&](bool set, std::string_view name, int64_t value, int64_t max) {
    if (set) InIntRange(problems, path + std::string(name), value, 1, max);
  };
  size(arch.has_hidden_size(), "hidden_size", arch.hidden_size(), models::kMaxHiddenSize);
  size(arch.has_intermediate_size(), "intermediate_size", arch.intermediate_size(),
       models::kMaxIntermediateSize);
  size(arch.has_num_layers(), "num_layers", arch.num_layers(), models::kMaxLayers);
  size(arch.has_num_attention_heads(), "num_attention_heads", arch.num_attention_heads(),
       models::kMaxHeads);
  size(arch.has_num_key_value_heads(), "num_key_value_heads", arch.num_key_value_heads(),
       models::kMaxHeads);
  size(arch.has_vocab_size(), "vocab_size", arch.vocab_size(), models::kMaxVocabSize);
  size(arch.has_max_position_embeddings(), "max_position_embeddings",
       arch.max_position_embeddings(), models::kMaxPositions);
  if (arch.has_rope_theta()) Positive(problems, path + "rope_theta", arch.rope_theta());
  if (arch.has_rms_norm_eps()) Positive(problems, path + "rms_norm_eps", arch.rms_norm_eps());

  const int64_t heads = arch.num_attention_heads();
  if (arch.has_num_key_value_heads() && arch.has_num_attention_heads() && heads >= 1 &&
      arch.num_key_value_heads() >= 1 && heads % arch.num_key_value_heads() != 0) {
    problems.Add(path, "num_key_value_heads=", arch.num_key_value_heads(),
                 " does not divide num_attention_heads=", heads);
  }
  if (arch.has_hidden_size() && arch.has_num_attention_heads() && heads >= 1 &&
      arch.hidden_size() >= 1) {
    if (arch.hidden_size() % heads != 0) {
      problems.Add(path, "num_attention_heads=", heads,
                   " does not divide hidden_size=", arch.hidden_size());
    } else if ((arch.hidden_size() / heads) % 2 != 0) {
      problems.Add(path, "hidden_size=", arch.hidden_size(), " / num_attention_heads=", heads,
                   " gives head dim ", arch.hidden_size() / heads, ": RoPE needs an even one");
    }
  }
  if (arch.has_rope_scaling()) CheckRopeScaling(arch, problems);
}

// The SSA rules are ssa::SsaOptionsProblems'; only what the options cannot hold (a clamp with one
// bound) is checked here. A disabled SSA section is ignored, its values as its flags.
void CheckSsa(const config::SsaConfig& ssa, Problems& problems) {
  if (!ssa.enabled()) return;
  if (ssa.has_temperature_clamp() &&
      (!ssa.temperature_clamp().has_lo() || !ssa.temperature_clamp().has_hi())) {
    problems.Add(
        "model.ssa.temperature_clamp: set both lo and hi (e.g. lo: 0.9 hi: 1.1), or "
        "remove it for no clamp");
    return;
  }
  // Non-finite values were reported by CheckNumbersAndEnums.
  const ssa::SsaOptions options = training::SsaOptionsFromConfig(ssa);
  if (!std::isfinite(options.alpha_init) || !std::isfinite(options.temperature_lr_scale) ||
      (options.temperature_clamp && (!std::isfinite(options.temperature_clamp->lo) ||
                                     !std::isfinite(options.temperature_clamp->hi)))) {
    return;
  }
  for (const std::string& problem : ssa::SsaOptionsProblems(options, "model.ssa")) {
    problems.Add(problem);
  }
}

// model.peft and model.lora (docs/training.md, "Parameter-efficient fine-tuning"); what needs the
// architecture (SSA from a model directory, the rank against the projections' sizes) is checked
// where the model is resolved (training::ResolveModelArchitecture).
void CheckPeft(const config::JobConfig& job, Problems& problems) {
  const config::ModelConfig& model = job.model();
  if (const absl::StatusOr<models::ExportFormat> format = training::ResolveExportFormat(
          job, job.training().export_format(), "training.export_format");
      !format.ok()) {
    problems.Add(format.status().message());
  }
  if (model.has_peft()) {
    const config::PeftConfig& peft = model.peft();
    if (!peft.adapters() && !peft.ssa() && !peft.norms() && !peft.embeddings()) {
      problems.Add(
          "model.peft trains nothing: set at least one of adapters, ssa, norms, embeddings to "
          "true, or remove model.peft for a full fine-tune");
    }
    if (peft.adapters() && !model.has_lora()) {
      problems.Add(
          "model.peft.adapters=true but the model has no adapters: add model.lora { rank: 16 "
          "targets: \"q_proj\" ... }, or set adapters to false");
    }
    if (peft.ssa() && !model.ssa().enabled() && !model.has_hf_dir()) {
      problems.Add(
          "model.peft.ssa=true but SSA is off: set model.ssa.enabled=true, or set "
          "model.peft.ssa to false");
    }
  }
  if (!model.has_lora()) return;
  const config::LoraConfig& lora = model.lora();
  if (!model.has_peft() || !model.peft().adapters()) {
    problems.Add(
        "model.lora without model.peft { adapters: true }: adapters that do not train stay at "
        "zero; add model.peft { adapters: true } (the base is then frozen), or remove model.lora");
  }
  constexpr int64_t kMaxLoraRank = 4096;
  if (lora.rank() < 1 || lora.rank() > kMaxLoraRank) {
    problems.Add("model.lora.rank=", lora.rank(), ": give a rank in [1, ", kMaxLoraRank,
                 "] (16 or 64 are usual)");
  }
  if (lora.has_alpha() && !(lora.alpha() > 0)) {
    problems.Add("model.lora.alpha=", lora.alpha(), ": must be > 0 (the default is the rank)");
  }
  if (!(lora.dropout() >= 0 && lora.dropout() < 1)) {
    problems.Add("model.lora.dropout=", lora.dropout(),
                 ": give a probability in [0, 1) (peft's lora_dropout; 0.05 or 0.1 are usual)");
  }
  if (lora.targets().empty()) {
    problems.Add(
        "model.lora.targets is empty: name the projections to adapt, e.g. targets: [\"q_proj\", "
        "\"k_proj\", \"v_proj\", \"o_proj\"]");
  }
  std::set<models::LoraTarget> seen;
  for (const std::string& name : lora.targets()) {
    const std::optional<models::LoraTarget> target = models::LoraTargetNamed(name);
    if (!target.has_value()) {
      const std::vector<std::string> known = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};
      const std::string closest = strings::ClosestName(name, known);
      problems.Add("model.lora.targets: unknown projection \"", name, "\"",
                   closest.empty() ? "" : absl::StrCat(" (did you mean \"", closest, "\"?)"),
                   "; known: ", absl::StrJoin(known, ", "));
    } else if (!seen.insert(*target).second) {
      problems.Add("model.lora.targets names ", models::LoraTargetName(*target),
                   " twice: name each projection once");
    }
  }
}

// model.attention_backend=CUDNN needs a CUDA run. Whether the binary has the core and the library
// loads is checked where the model is built (job_setup's AttentionBackendFor), not here: plan and
// launch run on machines without the GPUs, often from a CPU-only build.
void CheckAttentionBackend(const config::JobConfig& job, Problems& problems) {
  if (job.model().attention_backend() == config::AttentionBackend::CUDNN &&
      job.training().device() == config::TrainingConfig::CPU) {
    problems.Add(
        "model.attention_backend=CUDNN runs on CUDA only, but training.device=CPU: use AUTO or "
        "FUSED, or train on CUDA");
  }
}

void CheckModel(const config::JobConfig& job, Problems& problems) {
  const config::ModelConfig& model = job.model();
  const std::vector<std::string> presets = models::LlamaPresetNames();
  switch (model.source_case()) {
    case config::ModelConfig::SOURCE_NOT_SET:
      problems.Add("model: no model source: set model.preset (one of ",
                   absl::StrJoin(presets, ", "),
                   ") or model.hf_dir (a Hugging Face model directory)");
      break;
    case config::ModelConfig::kPreset:
      if (std::find(presets.begin(), presets.end(), model.preset()) == presets.end()) {
        const std::string closest = strings::ClosestName(model.preset(), presets);
        problems.Add("model.preset=\"", model.preset(), "\": unknown preset",
                     closest.empty() ? "" : absl::StrCat(" (did you mean \"", closest, "\"?)"),
                     "; known presets: ", absl::StrJoin(presets, ", "));
      }
      break;
    case config::ModelConfig::kHfDir:
      if (model.hf_dir().empty()) {
        problems.Add(
            "model.hf_dir is empty: give a Hugging Face model directory "
            "(config.json + *.safetensors)");
      }
      break;
  }
  if (model.has_architecture()) CheckArchitecture(model.architecture(), problems);
  CheckSsa(model.ssa(), problems);
  CheckPeft(job, problems);
  CheckAttentionBackend(job, problems);
}

void CheckMegatronDataset(const config::MegatronDataset& dataset, const std::string& path,
                          Problems& problems) {
  const std::string& prefix = dataset.path_prefix();
  if (prefix.empty()) {
    problems.Add(path, ".path_prefix is empty: give the dataset path without .bin/.idx");
  }
  for (const auto& [field, value] :
       {std::pair{".path_prefix", prefix},
        std::pair{".loss_mask_path_prefix", dataset.loss_mask_path_prefix()}}) {
    if (absl::EndsWith(value, ".bin") || absl::EndsWith(value, ".idx")) {
      problems.Add(path, field, "=\"", value, "\": drop the extension (\"",
                   value.substr(0, value.size() - 4), "\"): the prefix names both .bin and .idx");
    }
  }
  if (!dataset.loss_mask_path_prefix().empty() &&
      dataset.loss_mask_path_prefix() == dataset.path_prefix()) {
    problems.Add(path, ".loss_mask_path_prefix names the token dataset itself (\"", prefix,
                 "\"): give the mask's own prefix (kelvin prepare-data writes PREFIX_loss_mask)");
  }
}

void CheckTokenFile(const config::TokenFile& file, const std::string& path,
                    const config::DataConfig& data, Problems& problems) {
  if (file.path().empty()) problems.Add(path, ".path is empty: give the token file");
  if (file.has_document_separator_token()) {
    AtLeast(problems, path + ".document_separator_token", file.document_separator_token(), 0);
    if (file.dtype() == config::TokenFile::UINT16 && file.document_separator_token() > 65535) {
      problems.Add(path, ".document_separator_token=", file.document_separator_token(),
                   ": a UINT16 token file cannot hold it (ids 0..65535), so no document would "
                   "ever end");
    }
  } else if (data.document_masking()) {
    problems.Add("data.document_masking needs ", path,
                 ".document_separator_token (the token id that ends each document)");
  } else if (data.packing() == config::DataConfig::DOCUMENTS) {
    problems.Add("data.packing=DOCUMENTS needs ", path,
                 ".document_separator_token (the token id that ends each document)");
  }
}

void CheckBlend(const config::DataConfig& data, Problems& problems) {
  const config::DataBlend& blend = data.blend();
  if (blend.corpora_size() < 2) {
    problems.Add("data.blend has ", blend.corpora_size(),
                 " corpora: a blend mixes at least 2 (for one, use data.megatron or "
                 "data.token_file)");
  }
  for (int i = 0; i < blend.corpora_size(); ++i) {
    const config::BlendedCorpus& corpus = blend.corpora(i);
    const std::string path = absl::StrCat("data.blend.corpora[", i, "]");
    switch (corpus.source_case()) {
      case config::BlendedCorpus::SOURCE_NOT_SET:
        problems.Add(path, ": no source: set megatron or token_file");
        break;
      case config::BlendedCorpus::kMegatron:
        CheckMegatronDataset(corpus.megatron(), path + ".megatron", problems);
        break;
      case config::BlendedCorpus::kTokenFile:
        CheckTokenFile(corpus.token_file(), path + ".token_file", data, problems);
        break;
    }
    if (!(corpus.weight() > 0) || !std::isfinite(corpus.weight())) {
      problems.Add(path, ".weight=", corpus.weight(), ": must be a positive number");
    }
  }
  double total = 0;  // the shares are weight / total: a total of inf makes every share 0 or nan
  for (const config::BlendedCorpus& corpus : blend.corpora()) total += corpus.weight();
  if (!std::isfinite(total) && blend.corpora_size() >= 2 &&
      std::all_of(blend.corpora().begin(), blend.corpora().end(),
                  [](const config::BlendedCorpus& c) { return std::isfinite(c.weight()); })) {
    problems.Add(
        "data.blend: the weights sum to ", total,
        ": give relative weights whose sum is a finite number (e.g. shares that sum to 1)");
  }
}

// The files training reads: each Megatron prefix and token file of data (and of its blend).
std::vector<std::string> TrainingDataPaths(const config::DataConfig& data) {
  std::vector<std::string> paths;
  const auto add = [&paths](const auto& source) {
    if (source.has_megatron()) paths.push_back(source.megatron().path_prefix());
    if (source.has_token_file()) paths.push_back(source.token_file().path());
  };
  add(data);
  for (const config::BlendedCorpus& corpus : data.blend().corpora()) add(corpus);
  return paths;
}

// The source of a held-out corpus at `path` ("data.eval", "data.also_eval[0].corpus").
void CheckHeldOutSource(const config::HeldOutCorpus& corpus, const std::string& path,
                        const config::DataConfig& data, Problems& problems) {
  switch (corpus.source_case()) {
    case config::HeldOutCorpus::SOURCE_NOT_SET:
      problems.Add(path, ": no source: set megatron or token_file");
      break;
    case config::HeldOutCorpus::kMegatron:
      CheckMegatronDataset(corpus.megatron(), path + ".megatron", problems);
      break;
    case config::HeldOutCorpus::kTokenFile:
      CheckTokenFile(corpus.token_file(), path + ".token_file", data, problems);
      break;
  }
}

// data.eval: valid, and not a corpus the job trains on (its loss would not be held out; a set
// of data.also_eval may be one, e.g. to watch the training set's loss).
void CheckHeldOutCorpus(const config::DataConfig& data, Problems& problems) {
  CheckHeldOutSource(data.eval(), "data.eval", data, problems);
  const std::string held_out = data.eval().has_megatron() ? data.eval().megatron().path_prefix()
                                                          : data.eval().token_file().path();
  const auto normal = [](const std::string& p) {
    return std::filesystem::path(p).lexically_normal();
  };
  for (const std::string& trained : TrainingDataPaths(data)) {
    if (!held_out.empty() && normal(held_out) == normal(trained)) {
      problems.Add("data.eval is \"", held_out,
                   "\", which the job trains on: its loss would not be held out; give data that "
                   "training does not read, or hold out part of it with data.eval_fraction");
    }
  }
  if (data.has_passkey()) {
    problems.Add("data.eval: the passkey task evaluates on fresh samples; remove data.eval");
  }
  if (data.eval_fraction() != 0) {
    problems.Add("data.eval and data.eval_fraction=", data.eval_fraction(),
                 " both give held-out data: keep one");
  }
}

void CheckData(const config::JobConfig& job, JobUse use, Problems& problems) {
  const config::DataConfig& data = job.data();
  switch (data.source_case()) {
    case config::DataConfig::SOURCE_NOT_SET:
      if (use == JobUse::kForwardOnly) break;  // the model runs on the command's own input
      problems.Add(
          "data: no data source: set one of data.megatron, data.token_file, data.blend, "
          "data.passkey");
      break;
    case config::DataConfig::kMegatron:
      CheckMegatronDataset(data.megatron(), "data.megatron", problems);
      break;
    case config::DataConfig::kTokenFile:
      CheckTokenFile(data.token_file(), "data.token_file", data, problems);
      break;
    case config::DataConfig::kBlend:
      CheckBlend(data, problems);
      break;
    case config::DataConfig::kPasskey: {
      const config::PasskeyTask& passkey = data.passkey();
      InRange(problems, "data.passkey.min_depth", passkey.min_depth(), 0, 1, true);
      InRange(problems, "data.passkey.max_depth", passkey.max_depth(), 0, 1, true);
      if (passkey.min_depth() > passkey.max_depth()) {
        problems.Add("data.passkey: min_depth=", passkey.min_depth(),
                     " must be <= max_depth=", passkey.max_depth());
      }
      if (passkey.distractors() < 0) {
        problems.Add("data.passkey.distractors=", passkey.distractors(), ": must be >= 0");
      } else if (const int64_t need = data::MinPasskeySequenceLength(passkey.distractors());
                 job.training().seq_length() < need) {
        int64_t suggested = 256;  // a power of two with room for filler
        while (suggested <= need) suggested *= 2;
        problems.Add(
            "training.seq_length=", job.training().seq_length(),
            " is too short for data.passkey: the key sentence, ",
            passkey.distractors() > 0 ? absl::StrCat(passkey.distractors(), " decoy sentences, ")
                                      : std::string(),
            "question and answer need ", need, " tokens (use ", suggested, " or more for filler",
            passkey.distractors() > 0 ? ", or fewer data.passkey.distractors)" : ")");
      }
      if (const int64_t shortest = data::MinPasskeySequenceLength(passkey.distractors());
          passkey.min_length() != 0 && passkey.distractors() >= 0 &&
          (passkey.min_length() < shortest || passkey.min_length() > job.training().seq_length())) {
        problems.Add("data.passkey.min_length=", passkey.min_length(),
                     ": must be 0 (every sample fills its row) or in [", shortest, ", ",
                     job.training().seq_length(),
                     "]: the shortest sample (with data.passkey.distractors=",
                     passkey.distractors(), "), and training.seq_length");
      }
      if (data.eval_fraction() != 0) {
        problems.Add("data.eval_fraction=", data.eval_fraction(),
                     ": the passkey task evaluates on fresh samples; remove eval_fraction");
      }
      if (data.packing() != config::DataConfig::STREAM) {
        problems.Add("data.packing=", config::DataConfig::Packing_Name(data.packing()),
                     ": passkey rows are whole samples already; remove data.packing");
      }
      break;
    }
  }
  InRange(problems, "data.eval_fraction", data.eval_fraction(), 0, 1, false);
  if (data.has_eval()) CheckHeldOutCorpus(data, problems);
  std::set<std::string> names;
  for (int i = 0; i < data.also_eval_size(); ++i) {
    const config::NamedHeldOutCorpus& also = data.also_eval(i);
    const std::string path = absl::StrCat("data.also_eval[", i, "]");
    if (also.name().empty() || !std::all_of(also.name().begin(), also.name().end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        })) {
      problems.Add(path, ".name=\"", also.name(),
                   "\": name the set with letters, digits, '_' and '-' (it names its scalars)");
    } else if (!names.insert(also.name()).second) {
      problems.Add(path, ".name=\"", also.name(), "\" names another data.also_eval set too");
    }
    CheckHeldOutSource(also.corpus(), path + ".corpus", data, problems);
  }
  const bool has_main_eval = data.has_passkey() || data.has_eval() || data.eval_fraction() > 0;
  if (data.also_eval_size() > 0 && (!has_main_eval || job.training().eval_interval() <= 0)) {
    problems.Add(
        "data.also_eval is scored beside the main evaluation: set training.eval_interval "
        "and held-out data (data.eval or data.eval_fraction)");
  }
  const bool needs_held_out_data = !data.has_passkey() && !data.has_eval();
  if (job.training().eval_interval() > 0 && needs_held_out_data && data.eval_fraction() == 0) {
    problems.Add("training.eval_interval=", job.training().eval_interval(),
                 " needs held-out data: set data.eval_fraction (e.g. 0.01) or a data.eval corpus");
  }
}

void CheckOptimizer(const config::OptimizerConfig& optimizer, JobUse use, Problems& problems) {
  if (use == JobUse::kTraining || optimizer.lr() != 0) {
    Positive(problems, "optimizer.lr", optimizer.lr());
  }
  InRange(problems, "optimizer.beta1", optimizer.beta1(), 0, 1, false);
  InRange(problems, "optimizer.beta2", optimizer.beta2(), 0, 1, false);
  Positive(problems, "optimizer.eps", optimizer.eps());
  NonNegative(problems, "optimizer.weight_decay", optimizer.weight_decay());
  NonNegative(problems, "optimizer.grad_clip_norm", optimizer.grad_clip_norm());
}

void CheckLrSchedule(const config::JobConfig& job, Problems& problems) {
  const config::LrScheduleConfig& schedule = job.lr_schedule();
  const int64_t steps = job.training().steps();
  AtLeast(problems, "lr_schedule.warmup_steps", schedule.warmup_steps(), 0);
  InRange(problems, "lr_schedule.min_lr_ratio", schedule.min_lr_ratio(), 0, 1, true);
  const bool warmup_fits = steps < 1 || schedule.warmup_steps() <= steps;
  if (!warmup_fits) {
    problems.Add("lr_schedule.warmup_steps=", schedule.warmup_steps(),
                 " exceeds training.steps=", steps);
  }
  const bool decays = schedule.type() != config::LrScheduleConfig::CONSTANT;
  const std::string type = config::LrScheduleConfig::Type_Name(schedule.type());
  if (decays && warmup_fits && schedule.decay_steps() <= schedule.warmup_steps()) {
    problems.Add("lr_schedule.decay_steps=", schedule.decay_steps(),
                 " must be > warmup_steps=", schedule.warmup_steps(), " for ", type);
  } else if (schedule.type() == config::LrScheduleConfig::WARMUP_STABLE_DECAY && warmup_fits &&
             (schedule.cooldown_steps() < 1 ||
              schedule.cooldown_steps() > schedule.decay_steps() - schedule.warmup_steps())) {
    problems.Add("lr_schedule.cooldown_steps=", schedule.cooldown_steps(), " must be in [1, ",
                 schedule.decay_steps() - schedule.warmup_steps(),
                 "] (decay_steps - warmup_steps) for WARMUP_STABLE_DECAY");
  }
}

void CheckTraining(const config::JobConfig& job, JobUse use, Problems& problems) {
  const config::TrainingConfig& training = job.training();
  // The least value of the fields training requires: 0 (unset) is allowed where only the model
  // runs.
  const int64_t required = use == JobUse::kTraining ? 1 : 0;
  // Upper limits keep loops and sizes bounded (and far above any real job).
  InIntRange(problems, "training.steps", training.steps(), required, kMaxSteps);
  InIntRange(problems, "training.micro_batch_size", training.micro_batch_size(), 1,
             kMaxBatchSequences);
  InIntRange(problems, "training.global_batch_size", training.global_batch_size(), required,
             kMaxBatchSequences);
  InIntRange(problems, "training.gradient_accumulation_steps",
             training.gradient_accumulation_steps(), 0, kMaxBatchSequences);
  InIntRange(problems, "training.seq_length", training.seq_length(), required,
             models::kMaxPositions);
  InIntRange(problems, "training.eval_interval", training.eval_interval(), 0, kMaxSteps);
  if (!training.eval_whole_set()) {
    InIntRange(problems, "training.eval_steps", training.eval_steps(), 1, kMaxEvalSteps);
  }
  InIntRange(problems, "training.threads", training.threads(), 0, kMaxThreads);
  const config::LossSpikeConfig& loss_spike = training.loss_spike();
  // Non-finite values were reported by CheckNumbersAndEnums.
  if (std::isfinite(loss_spike.factor()) && !(loss_spike.factor() > 1)) {
    problems.Add("training.loss_spike.factor=", loss_spike.factor(),
                 " must be a finite number > 1 (the loss a spike exceeds is factor times the "
                 "recent mean; set training.loss_spike.action=OFF for no check)");
  }
  if (std::isfinite(loss_spike.min_loss()) && loss_spike.min_loss() < 0) {
    problems.Add("training.loss_spike.min_loss=", loss_spike.min_loss(),
                 " must be a finite number >= 0");
  }
  InIntRange(problems, "training.loss_spike.window", loss_spike.window(), 1,
             training::kMaxLossSpikeWindow);
  InIntRange(problems, "training.loss_spike.max_skips", loss_spike.max_skips(), 0,
             training::kMaxLossSpikeWindow);
  const std::optional<int64_t> micro_batch_tokens =
      CheckedProduct(training.micro_batch_size(), training.seq_length());
  const bool sizes_in_range = training.micro_batch_size() <= kMaxBatchSequences &&
                              training.seq_length() <= models::kMaxPositions;
  if (sizes_in_range && (!micro_batch_tokens || *micro_batch_tokens > kMaxMicroBatchTokens)) {
    problems.Add("training.micro_batch_size=", training.micro_batch_size(),
                 " x training.seq_length=", training.seq_length(),
                 " tokens per micro-batch: at most ", kMaxMicroBatchTokens,
                 " (lower micro_batch_size: gradient accumulation gives the "
                 "same global batch)");
  }
  if (training.eval_whole_set() && job.data().has_passkey()) {
    problems.Add(
        "training.eval_whole_set: the passkey task makes its held-out samples without "
        "end; set training.eval_steps instead");
  } else if (training.eval_whole_set() && training.has_eval_steps()) {
    problems.Add("training.eval_whole_set scores every held-out row: remove training.eval_steps");
  }
  const config::Architecture& arch = job.model().architecture();
  if (arch.has_max_position_embeddings() &&
      training.seq_length() > arch.max_position_embeddings()) {
    problems.Add(
        "training.seq_length=", training.seq_length(),
        " exceeds model.architecture.max_position_embeddings=", arch.max_position_embeddings());
  }

  const int64_t micro = training.micro_batch_size();
  const int64_t global = training.global_batch_size();
  const int64_t accumulation = training.gradient_accumulation_steps();
  const int64_t data_parallel = job.parallel().data_parallel();
  if (micro < 1 || global < 1 || accumulation < 0 || data_parallel < 0) return;
  if (global % micro != 0) {
    problems.Add("training.global_batch_size=", global,
                 " is not a multiple of micro_batch_size=", micro);
    return;
  }
  if (accumulation > 0) {
    const std::optional<int64_t> per_rank = CheckedProduct(micro, accumulation);
    if (!per_rank || global % *per_rank != 0) {
      problems.Add("training.global_batch_size=", global,
                   " is not a multiple of micro_batch_size * gradient_accumulation_steps = ", micro,
                   " * ", accumulation);
    } else if (data_parallel > 0 && CheckedProduct(*per_rank, data_parallel) != global) {
      problems.Add("training.global_batch_size=", global,
                   " must equal micro_batch_size * gradient_accumulation_steps * "
                   "parallel.data_parallel = ",
                   micro, " * ", accumulation, " * ", data_parallel);
    }
  } else if (data_parallel > 0) {
    const std::optional<int64_t> per_pass = CheckedProduct(micro, data_parallel);
    if (!per_pass || global % *per_pass != 0) {
      problems.Add("training.global_batch_size=", global,
                   " is not a multiple of micro_batch_size * parallel.data_parallel = ", micro,
                   " * ", data_parallel);
    }
  }
}

void CheckCheckpoint(const config::JobConfig& job, Problems& problems) {
  const config::CheckpointConfig& checkpoint = job.checkpoint();
  AtLeast(problems, "checkpoint.interval_steps", checkpoint.interval_steps(), 0);
  AtLeast(problems, "checkpoint.keep_last", checkpoint.keep_last(), 0);
  const int64_t eval_interval = job.training().eval_interval();
  if (checkpoint.keep_best() && eval_interval <= 0) {
    problems.Add("checkpoint.keep_best=true needs an evaluation: set training.eval_interval");
  } else if (checkpoint.keep_best() && checkpoint.interval_steps() % eval_interval != 0) {
    problems.Add(
        "checkpoint.keep_best=true needs checkpoint.interval_steps=", checkpoint.interval_steps(),
        " to be a multiple of training.eval_interval=", eval_interval,
        ", so that each checkpoint records its evaluation loss");
  }
  if (!checkpoint.dir().empty()) return;
  if (checkpoint.interval_steps() > 0) {
    problems.Add("checkpoint.interval_steps=", checkpoint.interval_steps(),
                 " needs checkpoint.dir (where to write them)");
  }
  if (checkpoint.async_save()) {
    problems.Add("checkpoint.async_save=true needs checkpoint.dir (where to write them)");
  }
  if (checkpoint.keep_last() > 0) {
    problems.Add("checkpoint.keep_last=", checkpoint.keep_last(), " needs checkpoint.dir");
  }
  if (checkpoint.keep_best()) problems.Add("checkpoint.keep_best=true needs checkpoint.dir");
  if (checkpoint.resume() == config::CheckpointConfig::REQUIRED) {
    problems.Add("checkpoint.resume=REQUIRED needs checkpoint.dir (where to resume from)");
  }
}

void CheckParallel(const config::JobConfig& job, Problems& problems) {
  const config::ParallelConfig& parallel = job.parallel();
  AtLeast(problems, "parallel.tensor_parallel", parallel.tensor_parallel(), 1);
  AtLeast(problems, "parallel.pipeline_parallel", parallel.pipeline_parallel(), 1);
  AtLeast(problems, "parallel.virtual_pipeline_stages", parallel.virtual_pipeline_stages(), 1);
  AtLeast(problems, "parallel.context_parallel", parallel.context_parallel(), 1);
  AtLeast(problems, "parallel.data_parallel", parallel.data_parallel(), 0);
  AtLeast(problems, "parallel.collective_timeout_seconds", parallel.collective_timeout_seconds(),
          1);
  AtLeast(problems, "parallel.grad_bucket_elements", parallel.grad_bucket_elements(), 1);

  const bool interleaved = parallel.pipeline_schedule() == config::ParallelConfig::INTERLEAVED_1F1B;
  if (parallel.virtual_pipeline_stages() > 1 &&
      parallel.pipeline_schedule() == config::ParallelConfig::ONE_F_ONE_B) {
    problems.Add("parallel.virtual_pipeline_stages=", parallel.virtual_pipeline_stages(),
                 " needs pipeline_schedule INTERLEAVED_1F1B (or ALL_FORWARD_ALL_BACKWARD)");
  }
  const int64_t accumulation = job.training().gradient_accumulation_steps();
  if (parallel.virtual_pipeline_stages() > 1 && parallel.pipeline_parallel() >= 2 &&
      accumulation > 0 && accumulation % parallel.pipeline_parallel() != 0) {
    problems.Add("training.gradient_accumulation_steps=", accumulation,
                 " (micro-batches per step) must be a multiple of parallel.pipeline_parallel=",
                 parallel.pipeline_parallel(), " with virtual_pipeline_stages > 1");
  }
  if (interleaved) {
    if (parallel.virtual_pipeline_stages() < 2) {
      problems.Add(
          "parallel.pipeline_schedule=INTERLEAVED_1F1B needs virtual_pipeline_stages "
          ">= 2 (it is ",
          parallel.virtual_pipeline_stages(), ")");
    }
    if (parallel.pipeline_parallel() < 2) {
      problems.Add(
          "parallel.pipeline_schedule=INTERLEAVED_1F1B needs pipeline_parallel >= 2 (it "
          "is ",
          parallel.pipeline_parallel(), ")");
    }
  }
  if (parallel.sequence_parallel() && parallel.tensor_parallel() < 2) {
    problems.Add("parallel.sequence_parallel needs tensor_parallel >= 2 (it is ",
                 parallel.tensor_parallel(), "): set parallel.sequence_parallel=false");
  }
  const int64_t seq_length = job.training().seq_length();
  const int64_t context = parallel.context_parallel();
  if (seq_length < 1 || context < 1 || parallel.tensor_parallel() < 1) return;
  if (context > 1 && seq_length % (2 * context) != 0) {
    problems.Add("training.seq_length=", seq_length,
                 " must be a multiple of 2 * parallel.context_parallel = ", 2 * context,
                 " (context parallelism splits each sequence into 2 x context_parallel chunks)");
  } else if (parallel.sequence_parallel() &&
             (seq_length / context) % parallel.tensor_parallel() != 0) {
    problems.Add("training.seq_length=", seq_length, " / context_parallel=", context,
                 " must be a multiple of parallel.tensor_parallel=", parallel.tensor_parallel(),
                 " for sequence_parallel");
  }
}

// The seconds of a SLURM time limit written as minutes ("90"), "HH:MM:SS" or "D-HH:MM:SS" (sbatch
// accepts more forms; these are the unambiguous ones); nullopt for anything else.
std::optional<int64_t> SlurmTimeSeconds(absl::string_view time) {
  const auto number = [](absl::string_view part, size_t min_size,
                         size_t max_size) -> std::optional<int64_t> {
    if (part.size() < min_size || part.size() > max_size) return std::nullopt;
    int64_t value = 0;
    for (const char c : part) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  int64_t days = 0;
  const size_t dash = time.find('-');
  if (dash != absl::string_view::npos) {
    const std::optional<int64_t> d = number(time.substr(0, dash), 1, 3);
    if (!d) return std::nullopt;
    days = *d;
    time = time.substr(dash + 1);
  } else if (const std::optional<int64_t> minutes = number(time, 1, 6)) {
    return *minutes * 60;
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(time, ':');
  if (parts.size() != 3) return std::nullopt;
  const std::optional<int64_t> h = number(parts[0], 1, 3), m = number(parts[1], 2, 2),
                               sec = number(parts[2], 2, 2);
  if (!h || !m || !sec || *m >= 60 || *sec >= 60) return std::nullopt;
  return ((days * 24 + *h) * 60 + *m) * 60 + *sec;
}

// sbatch --mem's size: digits with an optional unit K, M, G or T (mebibytes without one), at most
// 1 EiB (no node is larger; the product cannot overflow).
bool SlurmMemorySize(const std::string& size) {
  constexpr std::string_view kUnits = "KMGT";  // 2^(10 i) KiB
  constexpr int64_t kMaxKib = int64_t{1} << 50;
  std::string_view digits = size;
  int64_t kib_per_unit = 1024;
  if (!digits.empty()) {
    const size_t unit = kUnits.find(absl::ascii_toupper(static_cast<unsigned char>(digits.back())));
    if (unit != std::string_view::npos) {
      kib_per_unit = int64_t{1} << (10 * unit);
      digits.remove_suffix(1);
    }
  }
  if (digits.empty() || digits.size() > 15 ||
      !std::all_of(digits.begin(), digits.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    return false;
  }
  int64_t kib = 0;
  return !__builtin_mul_overflow(std::stoll(std::string(digits)), kib_per_unit, &kib) &&
         kib <= kMaxKib;
}

// launch.hardware after ResolveDefaults filled the preset's numbers: every rate given (their
// ranges are their fields' (range) options, checked with every number), the node at least one
// device.
void CheckHardware(const config::LaunchConfig& launch, Problems& problems) {
  if (!launch.has_hardware()) return;
  const config::HardwareConfig& h = launch.hardware();
  const bool preset = h.preset() != config::HardwareConfig::NONE;
  const std::string preset_name = config::HardwareConfig::Preset_Name(h.preset());
  const struct {
    const char* name;
    bool set;
    const char* example;
  } rates[] = {
      {"peak_tflops", h.has_peak_tflops(), "989.4 for an H100 in bf16"},
      {"memory_gbps", h.has_memory_gbps(), "4800 for an H200"},
      {"intra_node_gbps", h.has_intra_node_gbps(), "450 for NVLink 4"},
      {"inter_node_gbps", h.has_inter_node_gbps(), "50 for 400 Gb/s InfiniBand"},
      {"attention_tflops", h.has_attention_tflops(), "a measured forward + backward rate"},
  };
  for (const auto& rate : rates) {
    if (!rate.set && !(preset && absl::string_view(rate.name) == "attention_tflops")) {
      problems.Add("launch.hardware.", rate.name,
                   " is unset and launch.hardware has no preset: set it (e.g. ", rate.example,
                   "), or choose launch.hardware.preset H100_SXM or H200");
    }
  }
  if (!h.has_devices_per_node()) {
    problems.Add(
        "launch.hardware.devices_per_node is unset and launch.hardware has no preset: "
        "set it (e.g. 8 for an HGX node), or choose launch.hardware.preset H100_SXM or "
        "H200");
  } else if (h.devices_per_node() < 1 || h.devices_per_node() > 4096) {
    problems.Add("launch.hardware.devices_per_node=", h.devices_per_node(),
                 ": must be in [1, 4096]",
                 preset ? absl::StrCat(" (a node of ", preset_name,
                                       " holds 8 GPUs; leave it unset for the preset's)")
                        : "");
  } else if (preset && launch.gpus_per_node() > h.devices_per_node()) {
    problems.Add("launch.gpus_per_node=", launch.gpus_per_node(),
                 " > launch.hardware.devices_per_node=", h.devices_per_node(),
                 ": a node cannot give more GPUs than it holds; lower launch.gpus_per_node");
  }
}

void CheckLaunch(const config::JobConfig& job, Problems& problems) {
  const config::LaunchConfig& launch = job.launch();
  CheckHardware(launch, problems);
  AtLeast(problems, "launch.nodes", launch.nodes(), 1);
  AtLeast(problems, "launch.processes_per_node", launch.processes_per_node(), 1);
  AtLeast(problems, "launch.gpus_per_node", launch.gpus_per_node(), 0);
  AtLeast(problems, "launch.cpus_per_process", launch.cpus_per_process(), 0);
  AtLeast(problems, "launch.preemption_warning_seconds", launch.preemption_warning_seconds(), 0);
  AtLeast(problems, "launch.gpu_memory_gib", launch.gpu_memory_gib(), 0);
  const std::optional<int64_t> time_limit = SlurmTimeSeconds(launch.time_limit());
  if (!launch.time_limit().empty() && !time_limit.has_value()) {
    problems.Add("launch.time_limit=\"", absl::CHexEscape(launch.time_limit()),
                 "\": write minutes (\"90\"), \"HH:MM:SS\" or \"D-HH:MM:SS\"");
  } else if (time_limit.has_value() && launch.preemption_warning_seconds() >= *time_limit) {
    problems.Add("launch.preemption_warning_seconds=", launch.preemption_warning_seconds(),
                 " must be below launch.time_limit=\"", launch.time_limit(), "\" (", *time_limit,
                 " s): the warning would come before the job starts");
  }
  if (launch.requeue() && launch.preemption_warning_seconds() == 0) {
    problems.Add(
        "launch.requeue needs launch.preemption_warning_seconds (e.g. 300): without the warning "
        "a job that reaches its time limit is killed without a checkpoint, and SLURM does not "
        "requeue a TIMEOUT");
  }
  if (launch.gpus_per_node() > 0 && launch.processes_per_node() > launch.gpus_per_node() &&
      job.parallel().communication_backend() == config::ParallelConfig::NCCL) {
    problems.Add("launch.processes_per_node=", launch.processes_per_node(),
                 " > gpus_per_node=", launch.gpus_per_node(),
                 " with parallel.communication_backend=NCCL: NCCL needs a GPU per process");
  }
  const bool checkpoints = !job.checkpoint().dir().empty();
  if (launch.preemption_warning_seconds() > 0 && !checkpoints) {
    problems.Add("launch.preemption_warning_seconds=", launch.preemption_warning_seconds(),
                 " needs checkpoint.dir: the warning only helps when the trainer can save");
  }
  if (launch.requeue() && !checkpoints) {
    problems.Add("launch.requeue needs checkpoint.dir: a requeued job would start over");
  } else if (launch.requeue() && job.checkpoint().resume() != config::CheckpointConfig::AUTO) {
    problems.Add("launch.requeue needs checkpoint.resume=AUTO (it is ",
                 config::CheckpointConfig::Resume_Name(job.checkpoint().resume()),
                 "): the requeued job must continue from the latest checkpoint");
  }
  // Every string that reaches the batch script: SLURM names are names, options and setup lines
  // stay one line each (a newline would start a shell line of its own).
  for (const auto& [field, value] : {std::pair{"launch.partition", &launch.partition()},
                                     {"launch.account", &launch.account()},
                                     {"launch.qos", &launch.qos()}}) {
    const bool name = std::all_of(value->begin(), value->end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
             c == '.' || c == ',';
    });
    if (!name) {
      problems.Add(field, "=\"", absl::CHexEscape(*value),
                   "\": SLURM names hold only letters, digits, '_', '-', '.' (and ',' between "
                   "several)");
    }
  }
  const bool plugin =
      launch.mpi_plugin().size() <= 64 &&  // "" was resolved to "pmix"
      std::all_of(launch.mpi_plugin().begin(), launch.mpi_plugin().end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
  if (!plugin) {
    problems.Add("launch.mpi_plugin=\"", absl::CHexEscape(launch.mpi_plugin()),
                 "\": name srun's PMI plugin (letters, digits and '_', e.g. pmix or pmi2; `srun "
                 "--mpi=list` on the cluster lists them)");
  }
  if (!SlurmMemorySize(launch.memory_per_node())) {
    problems.Add("launch.memory_per_node=\"", absl::CHexEscape(launch.memory_per_node()),
                 "\": write a number of mebibytes, or a number with the unit K, M, G or T (e.g. "
                 "\"200G\"); \"0\" asks for all the memory of each node");
  }
  const auto has_control = [](const std::string& text) {
    return std::any_of(text.begin(), text.end(), [](char c) {
      return c != '\t' && absl::ascii_iscntrl(static_cast<unsigned char>(c));
    });
  };
  for (const std::string& option : launch.extra_sbatch_options()) {
    if (!absl::StartsWith(option, "--") || has_control(option) || absl::StrContains(option, "\t")) {
      problems.Add("launch.extra_sbatch_options \"", absl::CHexEscape(option),
                   "\": write one sbatch option per entry, as \"--name=value\" on one line");
    } else if (absl::StartsWith(option, "--mem=") || absl::StartsWith(option, "--mem-per-")) {
      problems.Add("launch.extra_sbatch_options \"", absl::CHexEscape(option),
                   "\": the job's memory request is launch.memory_per_node (#SBATCH --mem), and "
                   "sbatch refuses --mem with --mem-per-cpu or --mem-per-gpu; set "
                   "launch.memory_per_node instead");
    }
  }
  for (const std::string& line : launch.setup_commands()) {
    if (has_control(line)) {
      problems.Add("launch.setup_commands \"", absl::CHexEscape(line),
                   "\": one shell line per entry, without control characters");
    }
  }
}

}  // namespace

absl::Status ValidateJobConfig(const config::JobConfig& config, JobUse use) {
  config::JobConfig job = config;
  ResolveDefaults(job);
  Problems problems;
  CheckNumbersAndEnums(job, "", problems);
  CheckName(job, problems);
  CheckModel(job, problems);
  CheckData(job, use, problems);
  CheckOptimizer(job.optimizer(), use, problems);
  CheckLrSchedule(job, problems);
  CheckTraining(job, use, problems);
  CheckCheckpoint(job, problems);
  AtLeast(problems, "logging.log_interval", job.logging().log_interval(), 1);
  if (job.logging().has_profile()) {
    const config::ProfileSteps& profile = job.logging().profile();
    AtLeast(problems, "logging.profile.first_step", profile.first_step(), 1);
    if (profile.last_step() < profile.first_step() ||
        profile.last_step() > job.training().steps()) {
      problems.Add("logging.profile.last_step=", profile.last_step(),
                   " must be in [first_step=", profile.first_step(),
                   ", training.steps=", job.training().steps(), "]");
    }
  }
  // 0 (no MFU) or an accelerator's peak, 1 GFLOP/s to 1 EFLOP/s: a denormal peak made the plan's
  // least step time infinite.
  if (const double peak = job.logging().peak_tflops();
      std::isfinite(peak) && peak != 0 && !(peak >= 1e-3 && peak <= 1e6)) {
    problems.Add("logging.peak_tflops=", peak, ": must be 0 (no MFU) or in [0.001, 1e+06]");
  }
  CheckParallel(job, problems);
  CheckLaunch(job, problems);
  return problems.ToStatus();
}

}  // namespace kelvin::launcher
