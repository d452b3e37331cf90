// Semantic checks of a JobConfig, one function per section, every problem collected so that the
// user fixes a job in one pass. Non-finite numbers and unknown enum numbers are caught generically
// by walking the message; the per-section rules then skip non-finite values.
#include "launcher/job_config_validation.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/data/passkey_task.h"
#include "launcher/job_config.h"
#include "models/llama/llama_config.h"

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

// Rules shared by many fields. Non-finite doubles were reported by CheckNumbersAndEnums.
void AtLeast(Problems& problems, const std::string& path, int64_t value, int64_t minimum) {
  if (value < minimum) problems.Add(path, "=", value, ": must be >= ", minimum);
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

// Every double of the job is finite, every enum holds a named value (proto3 enums accept any
// number in text format). The schema's repeated fields are strings or messages.
void CheckNumbersAndEnums(const pb::Message& message, const std::string& path, Problems& problems) {
  const pb::Reflection& reflection = *message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    const std::string field_path = path.empty() ? field->name() : path + "." + field->name();
    if (field->is_repeated()) {  // strings (launch.*) or messages (data.blend.corpora)
      KELVIN_CHECK(field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING ||
                   field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE)
          << "check repeated field " << field->full_name();
      if (field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      for (int i = 0; i < reflection.FieldSize(message, field); ++i) {
        CheckNumbersAndEnums(reflection.GetRepeatedMessage(message, field, i),
                             absl::StrCat(field_path, "[", i, "]"), problems);
      }
      continue;
    }
    switch (field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        CheckNumbersAndEnums(reflection.GetMessage(message, field), field_path, problems);
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      case pb::FieldDescriptor::CPPTYPE_FLOAT: {
        const double value = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE
                                 ? reflection.GetDouble(message, field)
                                 : reflection.GetFloat(message, field);
        if (!std::isfinite(value))
          problems.Add(field_path, "=", value, ": must be a finite number");
        break;
      }
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
  const bool plain = std::all_of(job.name().begin(), job.name().end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (!plain) {
    problems.Add("name=\"", job.name(),
                 "\": use only letters, digits, '.', '_' and '-' (it names files and SLURM jobs)");
  }
}

void CheckRopeScaling(const config::RopeScaling& rope, Problems& problems) {
  const std::string path = "model.architecture.rope_scaling";
  if (rope.rope_type() == "default") {
    if (rope.has_factor() || rope.has_low_freq_factor() || rope.has_high_freq_factor() ||
        rope.has_original_max_position_embeddings()) {
      problems.Add(path,
                   ": factor, low_freq_factor, high_freq_factor and "
                   "original_max_position_embeddings apply to rope_type \"llama3\" only");
    }
    return;
  }
  if (rope.rope_type() != "llama3") {
    problems.Add(path, ".rope_type=\"", rope.rope_type(), "\": must be \"default\" or \"llama3\"");
    return;
  }
  if (!rope.has_factor() || !rope.has_low_freq_factor() || !rope.has_high_freq_factor() ||
      !rope.has_original_max_position_embeddings()) {
    problems.Add(path,
                 ": rope_type \"llama3\" needs factor, low_freq_factor, high_freq_factor "
                 "and original_max_position_embeddings (Llama-3.1: 8, 1, 4, 8192)");
    return;
  }
  if (std::isfinite(rope.factor()) && rope.factor() < 1) {
    problems.Add(path, ".factor=", rope.factor(), ": must be >= 1");
  }
  Positive(problems, path + ".low_freq_factor", rope.low_freq_factor());
  if (std::isfinite(rope.low_freq_factor()) && std::isfinite(rope.high_freq_factor()) &&
      !(rope.high_freq_factor() > rope.low_freq_factor())) {
    problems.Add(path, ": high_freq_factor=", rope.high_freq_factor(),
                 " must be > low_freq_factor=", rope.low_freq_factor());
  }
  AtLeast(problems, path + ".original_max_position_embeddings",
          rope.original_max_position_embeddings(), 1);
}

void CheckArchitecture(const config::Architecture& arch, Problems& problems) {
  const std::string path = "model.architecture.";
  const auto at_least_one = [&](bool set, std::string_view name, int64_t value) {
    if (set) AtLeast(problems, path + std::string(name), value, 1);
  };
  at_least_one(arch.has_hidden_size(), "hidden_size", arch.hidden_size());
  at_least_one(arch.has_intermediate_size(), "intermediate_size", arch.intermediate_size());
  at_least_one(arch.has_num_layers(), "num_layers", arch.num_layers());
  at_least_one(arch.has_num_attention_heads(), "num_attention_heads", arch.num_attention_heads());
  at_least_one(arch.has_num_key_value_heads(), "num_key_value_heads", arch.num_key_value_heads());
  at_least_one(arch.has_vocab_size(), "vocab_size", arch.vocab_size());
  at_least_one(arch.has_max_position_embeddings(), "max_position_embeddings",
               arch.max_position_embeddings());
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
  if (arch.has_rope_scaling()) CheckRopeScaling(arch.rope_scaling(), problems);
}

void CheckSsa(const config::SsaConfig& ssa, Problems& problems) {
  if (ssa.has_temperature_clamp()) {
    const config::TemperatureClamp& clamp = ssa.temperature_clamp();
    const std::string path = "model.ssa.temperature_clamp";
    if (!clamp.has_lo() || !clamp.has_hi()) {
      problems.Add(path, ": set both lo and hi (e.g. lo: 0.9 hi: 1.1), or remove it for no clamp");
    } else {
      Positive(problems, path + ".lo", clamp.lo());
      if (std::isfinite(clamp.lo()) && std::isfinite(clamp.hi()) && !(clamp.lo() < clamp.hi())) {
        problems.Add(path, ": lo=", clamp.lo(), " must be < hi=", clamp.hi());
      }
    }
  }
  NonNegative(problems, "model.ssa.temperature_lr_scale", ssa.temperature_lr_scale());
  if (!ssa.enabled()) return;
  const bool query_varies = ssa.query_temperature() && (ssa.token_aware() || ssa.position_aware());
  const bool value_varies = ssa.value_temperature() && ssa.token_aware();
  if (!query_varies && !value_varies) {
    const auto flag = [](bool on) { return on ? "true" : "false"; };
    problems.Add("model.ssa.enabled=true, but query_temperature=", flag(ssa.query_temperature()),
                 " value_temperature=", flag(ssa.value_temperature()),
                 " token_aware=", flag(ssa.token_aware()),
                 " position_aware=", flag(ssa.position_aware()),
                 " keep every temperature at 1 (vanilla attention): turn a temperature on, or set "
                 "model.ssa.enabled=false");
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
        const std::string closest = ClosestName(model.preset(), presets);
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

void CheckHeldOutCorpus(const config::DataConfig& data, Problems& problems) {
  CheckHeldOutSource(data.eval(), "data.eval", data, problems);
  if (data.has_passkey()) {
    problems.Add("data.eval: the passkey task evaluates on fresh samples; remove data.eval");
  }
  if (data.eval_fraction() != 0) {
    problems.Add("data.eval and data.eval_fraction=", data.eval_fraction(),
                 " both give held-out data: keep one");
  }
}

void CheckData(const config::JobConfig& job, Problems& problems) {
  const config::DataConfig& data = job.data();
  switch (data.source_case()) {
    case config::DataConfig::SOURCE_NOT_SET:
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
      if (job.training().seq_length() < data::MinPasskeySequenceLength()) {
        problems.Add("training.seq_length=", job.training().seq_length(),
                     " is too short for data.passkey: the key sentence, question and answer need ",
                     data::MinPasskeySequenceLength(), " tokens (use 256 or more for filler)");
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

void CheckOptimizer(const config::OptimizerConfig& optimizer, Problems& problems) {
  Positive(problems, "optimizer.lr", optimizer.lr());
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

void CheckTraining(const config::JobConfig& job, Problems& problems) {
  const config::TrainingConfig& training = job.training();
  AtLeast(problems, "training.steps", training.steps(), 1);
  AtLeast(problems, "training.micro_batch_size", training.micro_batch_size(), 1);
  AtLeast(problems, "training.global_batch_size", training.global_batch_size(), 1);
  AtLeast(problems, "training.gradient_accumulation_steps", training.gradient_accumulation_steps(),
          0);
  AtLeast(problems, "training.seq_length", training.seq_length(), 1);
  AtLeast(problems, "training.eval_interval", training.eval_interval(), 0);
  AtLeast(problems, "training.eval_steps", training.eval_steps(), 1);
  AtLeast(problems, "training.threads", training.threads(), 0);
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
                 " (ring attention splits each sequence into 2 * context_parallel chunks)");
  } else if (parallel.sequence_parallel() &&
             (seq_length / context) % parallel.tensor_parallel() != 0) {
    problems.Add("training.seq_length=", seq_length, " / context_parallel=", context,
                 " must be a multiple of parallel.tensor_parallel=", parallel.tensor_parallel(),
                 " for sequence_parallel");
  }
}

// "MM", "HH:MM:SS" or "D-HH:MM:SS" (sbatch accepts more forms; these are the unambiguous ones).
bool IsSlurmTime(absl::string_view time) {
  const auto digits = [](absl::string_view part, size_t min_size, size_t max_size) {
    return part.size() >= min_size && part.size() <= max_size &&
           std::all_of(part.begin(), part.end(),
                       [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
  };
  const size_t dash = time.find('-');
  if (dash != absl::string_view::npos) {
    if (!digits(time.substr(0, dash), 1, 3)) return false;
    time = time.substr(dash + 1);
  } else if (digits(time, 1, 6)) {
    return true;  // minutes
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(time, ':');
  return parts.size() == 3 && digits(parts[0], 1, 3) && digits(parts[1], 2, 2) &&
         digits(parts[2], 2, 2) && parts[1] < "60" && parts[2] < "60";
}

void CheckLaunch(const config::JobConfig& job, Problems& problems) {
  const config::LaunchConfig& launch = job.launch();
  AtLeast(problems, "launch.nodes", launch.nodes(), 1);
  AtLeast(problems, "launch.processes_per_node", launch.processes_per_node(), 1);
  AtLeast(problems, "launch.gpus_per_node", launch.gpus_per_node(), 0);
  AtLeast(problems, "launch.cpus_per_process", launch.cpus_per_process(), 0);
  AtLeast(problems, "launch.preemption_warning_seconds", launch.preemption_warning_seconds(), 0);
  AtLeast(problems, "launch.gpu_memory_gib", launch.gpu_memory_gib(), 0);
  if (!launch.time_limit().empty() && !IsSlurmTime(launch.time_limit())) {
    problems.Add("launch.time_limit=\"", launch.time_limit(),
                 "\": write minutes (\"90\"), \"HH:MM:SS\" or \"D-HH:MM:SS\"");
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
  for (const std::string& option : launch.extra_sbatch_options()) {
    if (!absl::StartsWith(option, "--") || absl::StrContains(option, "\n")) {
      problems.Add("launch.extra_sbatch_options \"", option,
                   "\": write one sbatch option per entry, as \"--name=value\"");
    }
  }
  for (const std::string& line : launch.setup_commands()) {
    if (absl::StrContains(line, "\n")) {
      problems.Add("launch.setup_commands \"", line, "\": one shell line per entry");
    }
  }
}

int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]);
      current[j] =
          std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (same ? 0 : 1)});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates) {
  const int typo_budget = std::max<int>(2, static_cast<int>(name.size()) / 3);
  std::string best;
  int best_distance = 0;
  for (const std::string& candidate : candidates) {
    const int distance = EditDistance(name, candidate);
    const absl::string_view typed(name.data(), name.size());
    const bool prefix = name.size() >= 3 && (absl::StartsWithIgnoreCase(candidate, typed) ||
                                             absl::StartsWithIgnoreCase(typed, candidate));
    if ((distance <= typo_budget || prefix) && (best.empty() || distance < best_distance)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

absl::Status ValidateJobConfig(const config::JobConfig& config) {
  config::JobConfig job = config;
  ResolveDefaults(job);
  Problems problems;
  CheckNumbersAndEnums(job, "", problems);
  CheckName(job, problems);
  CheckModel(job, problems);
  CheckData(job, problems);
  CheckOptimizer(job.optimizer(), problems);
  CheckLrSchedule(job, problems);
  CheckTraining(job, problems);
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
  NonNegative(problems, "logging.peak_tflops", job.logging().peak_tflops());
  CheckParallel(job, problems);
  CheckLaunch(job, problems);
  return problems.ToStatus();
}

}  // namespace kelvin::launcher
