// Job-config loading: text-format parsing with file:line:column errors and did-you-mean hints,
// dotted-path overrides, default resolution and the full text of the resolved job.
#include "launcher/config/job_config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/io/regular_file.h"
#include "core/status.h"
#include "core/strings/did_you_mean.h"
#include "launcher/config/job_config_validation.h"

namespace kelvin::launcher {
namespace {

namespace pb = ::google::protobuf;

// A job file is a few KB; anything this large is the wrong file (a dataset, a checkpoint).
constexpr std::uintmax_t kMaxJobFileBytes = 1 << 20;

struct TextError {
  int line = 0;  // 0-based, as protobuf reports it
  int column = 0;
  std::string message;
};

class ErrorList : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    errors.push_back({line, column, message});
  }
  std::vector<TextError> errors;
};

std::vector<std::string> FieldNames(const pb::Descriptor& message) {
  std::vector<std::string> names;
  for (int i = 0; i < message.field_count(); ++i) names.push_back(message.field(i)->name());
  return names;
}

std::vector<std::string> EnumValueNames(const pb::EnumDescriptor& enum_type) {
  std::vector<std::string> names;
  for (int i = 0; i < enum_type.value_count(); ++i) names.push_back(enum_type.value(i)->name());
  return names;
}

// Every message type of the schema with the first dotted path where it sits in a JobConfig
// ("" for JobConfig itself, "model.ssa" for SsaConfig).
std::vector<std::pair<const pb::Descriptor*, std::string>> SchemaMessagePaths() {
  std::vector<std::pair<const pb::Descriptor*, std::string>> paths = {
      {config::JobConfig::descriptor(), ""}};
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto [message, path] = paths[i];
    for (int f = 0; f < message->field_count(); ++f) {
      const pb::FieldDescriptor* field = message->field(f);
      const bool seen = std::any_of(paths.begin(), paths.end(), [&](const auto& known) {
        return known.first == field->message_type();
      });
      if (field->message_type() == nullptr || seen) continue;
      paths.emplace_back(field->message_type(),
                         path.empty() ? field->name() : absl::StrCat(path, ".", field->name()));
    }
  }
  return paths;
}

// Reads `"quoted"` at `pos` of `text`; advances `pos` past it. Empty when there is none.
std::string ReadQuoted(std::string_view text, size_t& pos) {
  const size_t open = text.find('"', pos);
  if (open == std::string_view::npos) return "";
  const size_t close = text.find('"', open + 1);
  if (close == std::string_view::npos) return "";
  pos = close + 1;
  return std::string(text.substr(open + 1, close - open - 1));
}

std::string DidYouMean(std::string_view name, const std::vector<std::string>& candidates) {
  const std::string closest = strings::ClosestName(name, candidates);
  return closest.empty() ? "" : absl::StrCat(" Did you mean \"", closest, "\"?");
}

// What protobuf's two most common text-format errors are about, and a hint:
//   Message type "kelvin.config.X" has no field named "y".
//   Unknown enumeration value of "v" for field "f".
struct Diagnosis {
  std::string culprit;  // the unknown name or value as written; empty for other errors
  std::string hint;
};

Diagnosis Diagnose(std::string_view message) {
  size_t pos = 0;
  if (message.starts_with("Message type \"") &&
      message.find("has no field named") != std::string_view::npos) {
    const std::string type_name = ReadQuoted(message, pos);
    const std::string field_name = ReadQuoted(message, pos);
    const pb::Descriptor* type =
        pb::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
    if (type == nullptr) return {};
    std::string hint = DidYouMean(field_name, FieldNames(*type));
    if (hint.empty()) {
      for (const auto& [other, path] : SchemaMessagePaths()) {
        if (other != type && other->FindFieldByName(field_name) != nullptr) {
          hint = absl::StrCat(
              " \"", field_name, "\" is a field of ", path.empty() ? "the job" : path, " (",
              path.empty() ? field_name : absl::StrCat(path, ".", field_name), ").");
          break;
        }
      }
    }
    return {field_name, absl::StrCat(hint, " Fields of ", type->full_name(), ": ",
                                     absl::StrJoin(FieldNames(*type), ", "), ".")};
  }
  if (message.starts_with("Unknown enumeration value of \"")) {
    const std::string value = ReadQuoted(message, pos);
    const std::string field_name = ReadQuoted(message, pos);
    std::vector<const pb::EnumDescriptor*> enum_types;  // of the enum fields with that name
    for (const auto& [type, path] : SchemaMessagePaths()) {
      const pb::FieldDescriptor* field = type->FindFieldByName(field_name);
      if (field != nullptr && field->enum_type() != nullptr &&
          std::find(enum_types.begin(), enum_types.end(), field->enum_type()) == enum_types.end()) {
        enum_types.push_back(field->enum_type());
      }
    }
    if (enum_types.size() != 1) return {value, ""};
    const std::vector<std::string> names = EnumValueNames(*enum_types.front());
    return {value, absl::StrCat(DidYouMean(value, names),
                                " Valid values: ", absl::StrJoin(names, ", "), ".")};
  }
  return {};
}

// protobuf's tokenizer counts columns with tab stops every 8 characters.
int AdvanceColumn(int column, char c) { return c == '\t' ? column + 8 - column % 8 : column + 1; }

// Offset in `text` of protobuf's 0-based (line, column).
size_t OffsetOf(std::string_view text, int line, int column) {
  size_t offset = 0;
  for (int i = 0; i < line; ++i) {
    offset = text.find('\n', offset);
    if (offset == std::string_view::npos) return text.size();
    ++offset;
  }
  for (int at = 0; offset < text.size() && text[offset] != '\n' && at < column; ++offset) {
    at = AdvanceColumn(at, text[offset]);
  }
  return offset;
}

// protobuf's 0-based (line, column) of `offset` in `text`.
std::pair<int, int> PositionOf(std::string_view text, size_t offset) {
  const size_t line_start = offset == 0 ? 0 : text.rfind('\n', offset - 1) + 1;  // npos + 1 = 0
  int column = 0;
  for (size_t i = line_start; i < offset; ++i) column = AdvanceColumn(column, text[i]);
  return {static_cast<int>(std::count(text.begin(), text.begin() + line_start, '\n')), column};
}

// "<source>:<line>:<column>: <message><hint>", 1-based. protobuf reports unknown names and values
// at the token after them; the position given is that of the name or value itself.
std::string FormatTextError(std::string_view text, std::string_view source_name,
                            const TextError& error) {
  const Diagnosis diagnosis = Diagnose(error.message);
  std::pair<int, int> position = {error.line, error.column};
  if (!diagnosis.culprit.empty()) {
    const size_t found =
        text.substr(0, OffsetOf(text, error.line, error.column)).rfind(diagnosis.culprit);
    if (found != std::string_view::npos) position = PositionOf(text, found);
  }
  return absl::StrCat(std::string(source_name), ":", position.first + 1, ":", position.second + 1,
                      ": ", error.message, diagnosis.hint);
}

std::string StripWhitespace(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  return std::string(text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1));
}

// "passkey_tiny_cpu" from "configs/passkey_tiny_cpu.textproto"; characters a job name may not
// hold become '_' ("my job.textproto" gives "my_job").
std::string JobNameFromSource(std::string_view source_name) {
  std::string name = std::filesystem::path(std::string(source_name)).stem().string();
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      c = '_';
    }
  }
  return name;
}

std::string TypeName(const pb::FieldDescriptor& field) {
  if (field.message_type() != nullptr) return field.message_type()->full_name();
  if (field.enum_type() != nullptr) return field.enum_type()->full_name();
  return field.type_name();
}

// The scalar field (singular, or a repeated one as the last component: an override sets its whole
// list) that the dotted path `components` names, walked through descriptors only (so that a bad
// path changes nothing). Errors name the bad component and the valid fields.
absl::StatusOr<const pb::FieldDescriptor*> ScalarFieldAt(
    const std::vector<std::string>& components) {
  const pb::Descriptor* type = config::JobConfig::descriptor();
  const pb::FieldDescriptor* field = nullptr;
  std::string walked;  // the path up to the current component
  for (size_t i = 0; i < components.size(); ++i) {
    const std::string& name = components[i];
    if (field != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(walked, " is a ", TypeName(*field),
                                                     ", not a message: \"", name,
                                                     "\" cannot be below it"));
    }
    field = type->FindFieldByName(name);
    if (field == nullptr) {
      const std::string closest = strings::ClosestName(name, FieldNames(*type));
      return absl::InvalidArgumentError(absl::StrCat(
          walked.empty() ? "the job" : walked, " (", type->full_name(), ") has no field \"", name,
          "\"", closest.empty() ? "" : absl::StrCat(" (did you mean \"", closest, "\"?)"),
          "; valid fields: ", absl::StrJoin(FieldNames(*type), ", ")));
    }
    walked = walked.empty() ? name : absl::StrCat(walked, ".", name);
    if (field->is_repeated() && field->message_type() != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(walked, " is a repeated message; overrides set values and lists of values"));
    }
    if (field->message_type() != nullptr) {
      type = field->message_type();
      if (i + 1 == components.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            walked, " is a message (", type->full_name(),
            "), not a value: set its fields one at a time, e.g. ", walked, ".",
            type->field(0)->name(), "=...; its fields: ", absl::StrJoin(FieldNames(*type), ", ")));
      }
      field = nullptr;
    }
  }
  return field;
}

// `message`'s set fields as text format, indented two spaces a level: a line per scalar (one per
// element of a repeated one, such as rope_scaling.short_factor), a block per message.
void PrintMessage(const pb::Message& message, int depth, std::string& out) {
  const pb::Reflection& reflection = *message.GetReflection();
  const pb::Descriptor& type = *message.GetDescriptor();
  const std::string indent(2 * depth, ' ');
  for (int i = 0; i < type.field_count(); ++i) {
    const pb::FieldDescriptor& field = *type.field(i);
    if (field.is_repeated()) {  // one line (scalar) or block (message) per element
      for (int e = 0; e < reflection.FieldSize(message, &field); ++e) {
        if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
          absl::StrAppend(&out, indent, field.name(), " {\n");
          PrintMessage(reflection.GetRepeatedMessage(message, &field, e), depth + 1, out);
          absl::StrAppend(&out, indent, "}\n");
          continue;
        }
        std::string value;
        pb::TextFormat::PrintFieldValueToString(message, &field, e, &value);
        absl::StrAppend(&out, indent, field.name(), ": ", value, "\n");
      }
      continue;
    }
    if (field.has_presence() && !reflection.HasField(message, &field)) {
      continue;  // unset oneof member, message or optional scalar
    }
    if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      absl::StrAppend(&out, indent, field.name(), " {\n");
      PrintMessage(reflection.GetMessage(message, &field), depth + 1, out);
      absl::StrAppend(&out, indent, "}\n");
    } else {
      std::string value;
      pb::TextFormat::PrintFieldValueToString(message, &field, -1, &value);
      absl::StrAppend(&out, indent, field.name(), ": ", value, "\n");
    }
  }
}

}  // namespace

absl::StatusOr<config::JobConfig> ParseJobConfigText(std::string_view text,
                                                     std::string_view source_name) {
  // A UTF-8 byte-order mark (some Windows editors write one) is skipped, as config.json's is.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  ErrorList errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  config::JobConfig config;
  if (!parser.ParseFromString(std::string(text), &config)) {
    if (errors.errors.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(source_name), ": not a valid text-format kelvin.config.JobConfig"));
    }
    return absl::InvalidArgumentError(FormatTextError(text, source_name, errors.errors.front()));
  }
  return config;
}

absl::Status ApplyOverride(std::string_view assignment, config::JobConfig& config) {
  const auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("override \"", std::string(assignment), "\": ", why));
  };
  const size_t equals = assignment.find('=');
  if (equals == std::string_view::npos) {
    return fail("expected <field.path>=<value>, e.g. optimizer.lr=1e-5");
  }
  const std::string path = StripWhitespace(assignment.substr(0, equals));
  const std::string value = StripWhitespace(assignment.substr(equals + 1));
  const std::vector<std::string> components = absl::StrSplit(path, '.');
  const absl::StatusOr<const pb::FieldDescriptor*> found = ScalarFieldAt(components);
  if (!found.ok()) return fail(found.status().message());
  const pb::FieldDescriptor* field = *found;

  // Text-format value; a string field also takes bare text. A repeated field takes a list,
  // [a, b, c] (bare strings quoted one by one), that replaces its elements.
  const auto quoted = [&](const std::string& element) {
    const bool bare = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING &&
                      !element.starts_with('"') && !element.starts_with('\'');
    return bare ? absl::StrCat("\"", absl::CEscape(element), "\"") : element;
  };
  std::string text;
  if (field->is_repeated()) {
    if (!value.starts_with('[') || !value.ends_with(']')) {
      return fail(
          absl::StrCat(path, " is a list: give its values in brackets, e.g. ", path, "=[a, b]"));
    }
    std::vector<std::string> elements;
    const std::string inside = StripWhitespace(value.substr(1, value.size() - 2));
    if (!inside.empty()) {
      for (const absl::string_view element : absl::StrSplit(inside, ',')) {
        elements.push_back(
            quoted(StripWhitespace(std::string_view(element.data(), element.size()))));
      }
    }
    text = absl::StrCat(field->name(), ": [", absl::StrJoin(elements, ", "), "]");
  } else {
    text = quoted(value);
  }
  ErrorList errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  std::unique_ptr<pb::Message> scratch(
      pb::MessageFactory::generated_factory()->GetPrototype(field->containing_type())->New());
  const auto parse = [&](pb::Message* into) {
    return field->is_repeated() ? parser.MergeFromString(text, into)
                                : parser.ParseFieldValueFromString(text, field, into);
  };
  if (!parse(scratch.get())) {
    std::string why =
        errors.errors.empty() ? "unexpected text after the value" : errors.errors.front().message;
    if (field->enum_type() != nullptr) {
      const std::vector<std::string> names = EnumValueNames(*field->enum_type());
      absl::StrAppend(&why, DidYouMean(value, names), " Valid values: ", absl::StrJoin(names, ", "),
                      ".");
    }
    return fail(
        absl::StrCat("bad value \"", value, "\" for ", path, " (", TypeName(*field), "): ", why));
  }
  pb::Message* target = &config;
  for (size_t i = 0; i + 1 < components.size(); ++i) {
    target = target->GetReflection()->MutableMessage(
        target, target->GetDescriptor()->FindFieldByName(components[i]));
  }
  if (field->is_repeated()) target->GetReflection()->ClearField(target, field);
  const bool parsed = parse(target);
  KELVIN_CHECK(parsed) << "override value parsed once but not twice: " << assignment;
  return absl::OkStatus();
}

namespace {

// launch.hardware's presets: NVIDIA's data-sheet figures for one HGX GPU (dense bf16 peak, HBM
// bandwidth, NVLink 4's 450 GB/s each way) and 400 Gb/s InfiniBand (50 GB/s) per GPU.
struct HardwarePreset {
  double peak_tflops, memory_gbps;
  int devices_per_node;
  double intra_node_gbps, inter_node_gbps;
};
constexpr HardwarePreset kH100Sxm = {989.4, 3350, 8, 450, 50};
constexpr HardwarePreset kH200 = {989.4, 4800, 8, 450, 50};

// The preset's numbers into the fields the job leaves unset (none without a preset).
void ResolveHardwareDefaults(config::HardwareConfig& hardware) {
  const HardwarePreset* preset = nullptr;
  if (hardware.preset() == config::HardwareConfig::H100_SXM) preset = &kH100Sxm;
  if (hardware.preset() == config::HardwareConfig::H200) preset = &kH200;
  if (preset == nullptr) return;
  if (!hardware.has_peak_tflops()) hardware.set_peak_tflops(preset->peak_tflops);
  if (!hardware.has_memory_gbps()) hardware.set_memory_gbps(preset->memory_gbps);
  if (!hardware.has_devices_per_node()) hardware.set_devices_per_node(preset->devices_per_node);
  if (!hardware.has_intra_node_gbps()) hardware.set_intra_node_gbps(preset->intra_node_gbps);
  if (!hardware.has_inter_node_gbps()) hardware.set_inter_node_gbps(preset->inter_node_gbps);
}

}  // namespace

void ResolveDefaults(config::JobConfig& config) {
  config::ModelConfig& model = *config.mutable_model();
  config::SsaConfig& ssa = *model.mutable_ssa();
  if (!ssa.has_query_temperature()) ssa.set_query_temperature(true);
  if (!ssa.has_value_temperature()) ssa.set_value_temperature(true);
  if (!ssa.has_token_aware()) ssa.set_token_aware(true);
  if (!ssa.has_position_aware()) ssa.set_position_aware(true);
  if (!ssa.has_weight_sharing()) ssa.set_weight_sharing(true);
  if (!ssa.has_alpha_init()) ssa.set_alpha_init(-8.0);
  if (!ssa.has_temperature_lr_scale()) ssa.set_temperature_lr_scale(1.0);
  if (!ssa.has_log_statistics()) ssa.set_log_statistics(true);
  // The cuDNN core is built but has not run on a GPU yet: not chosen unless asked for.
  if (!model.has_attention_backend()) model.set_attention_backend(config::AttentionBackend::FUSED);
  if (model.has_architecture() && model.architecture().has_rope_scaling() &&
      model.architecture().rope_scaling().rope_type().empty()) {
    model.mutable_architecture()->mutable_rope_scaling()->set_rope_type("default");
  }

  config::DataConfig& data = *config.mutable_data();
  if (data.has_passkey() && !data.passkey().has_max_depth()) {
    data.mutable_passkey()->set_max_depth(1.0);
  }

  config::OptimizerConfig& optimizer = *config.mutable_optimizer();
  if (!optimizer.has_beta1()) optimizer.set_beta1(0.9);
  if (!optimizer.has_beta2()) optimizer.set_beta2(0.95);
  if (!optimizer.has_eps()) optimizer.set_eps(1e-8);
  if (!optimizer.has_weight_decay()) optimizer.set_weight_decay(0.1);
  if (!optimizer.has_grad_clip_norm()) optimizer.set_grad_clip_norm(1.0);

  config::TrainingConfig& training = *config.mutable_training();
  if (!training.has_micro_batch_size()) training.set_micro_batch_size(1);
  if (!training.has_eval_steps() && !training.eval_whole_set()) training.set_eval_steps(10);
  config::LossSpikeConfig& loss_spike = *training.mutable_loss_spike();
  if (!loss_spike.has_factor()) loss_spike.set_factor(10.0);
  if (!loss_spike.has_window()) loss_spike.set_window(20);
  if (!loss_spike.has_max_skips()) loss_spike.set_max_skips(3);
  if (!loss_spike.has_min_loss()) loss_spike.set_min_loss(1.0);

  config::LrScheduleConfig& schedule = *config.mutable_lr_schedule();
  if (!schedule.has_min_lr_ratio()) schedule.set_min_lr_ratio(0.1);
  if (!schedule.has_decay_steps()) schedule.set_decay_steps(training.steps());
  if (!schedule.has_cooldown_steps()) {
    schedule.set_cooldown_steps(
        std::max<int64_t>((schedule.decay_steps() - schedule.warmup_steps()) / 5, 1));
  }

  config.mutable_checkpoint();
  config::LoggingConfig& logging = *config.mutable_logging();
  if (!logging.has_log_interval()) logging.set_log_interval(10);

  config::ParallelConfig& parallel = *config.mutable_parallel();
  if (!parallel.has_tensor_parallel()) parallel.set_tensor_parallel(1);
  if (!parallel.has_pipeline_parallel()) parallel.set_pipeline_parallel(1);
  if (!parallel.has_virtual_pipeline_stages()) parallel.set_virtual_pipeline_stages(1);
  if (!parallel.has_context_parallel()) parallel.set_context_parallel(1);
  if (!parallel.has_collective_timeout_seconds()) parallel.set_collective_timeout_seconds(600);
  if (!parallel.has_overlap_grad_reduce()) parallel.set_overlap_grad_reduce(true);
  if (!parallel.has_grad_bucket_elements()) parallel.set_grad_bucket_elements(40'000'000);
  if (!parallel.has_overlap_param_gather()) parallel.set_overlap_param_gather(true);

  config::LaunchConfig& launch = *config.mutable_launch();
  if (launch.has_hardware()) ResolveHardwareDefaults(*launch.mutable_hardware());
  if (!launch.has_nodes()) launch.set_nodes(1);
  if (!launch.has_processes_per_node()) launch.set_processes_per_node(1);
  if (launch.run_dir().empty() && !config.name().empty()) {
    launch.set_run_dir("runs/" + config.name());
  }
  if (launch.mpi_plugin().empty()) launch.set_mpi_plugin("pmix");
  if (launch.memory_per_node().empty()) launch.set_memory_per_node("0");

  if (model.precision() == config::ModelConfig::AUTO) {
    if (training.device() == config::TrainingConfig::CPU) {
      model.set_precision(config::ModelConfig::FP32);
    } else if (training.device() == config::TrainingConfig::CUDA) {
      model.set_precision(config::ModelConfig::BF16);
    }
  }
  // Gradient accumulation from an explicit data-parallel size, when it divides evenly (otherwise
  // validation reports the batch sizes).
  int64_t sequences_per_pass = 0;
  const bool overflow = __builtin_mul_overflow(
      training.micro_batch_size(), int64_t{parallel.data_parallel()}, &sequences_per_pass);
  if (!overflow && training.gradient_accumulation_steps() == 0 && sequences_per_pass > 0 &&
      training.global_batch_size() > 0 && training.global_batch_size() % sequences_per_pass == 0) {
    training.set_gradient_accumulation_steps(training.global_batch_size() / sequences_per_pass);
  }
}

std::string FormatResolvedConfig(const config::JobConfig& config) {
  std::string out;
  PrintMessage(config, 0, out);
  return out;
}

absl::StatusOr<config::JobConfig> ParseJobConfig(std::string_view text,
                                                 std::string_view source_name,
                                                 const std::vector<std::string>& overrides,
                                                 JobUse use) {
  KELVIN_ASSIGN_OR_RETURN(config::JobConfig config, ParseJobConfigText(text, source_name));
  for (const std::string& assignment : overrides) {
    KELVIN_RETURN_IF_ERROR(ApplyOverride(assignment, config));
  }
  if (config.name().empty()) config.set_name(JobNameFromSource(source_name));
  ResolveDefaults(config);
  const absl::Status valid = ValidateJobConfig(config, use);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source_name), ": ", valid.message()));
  }
  return config;
}

namespace {

// What a message about a relative path adds: the directory it was resolved against.
std::string ResolvedAgainstWorkingDirectory() {
  std::error_code error;
  const std::string here = std::filesystem::current_path(error).string();
  return absl::StrCat(" (relative paths are resolved against the working directory ",
                      error ? std::string("(unknown)") : here, ")");
}

}  // namespace

absl::StatusOr<config::JobConfig> LoadJobConfig(const std::string& path,
                                                const std::vector<std::string>& overrides,
                                                JobUse use) {
  absl::StatusOr<std::string> text = io::ReadRegularFile(path, "job file", kMaxJobFileBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("job file ", path, " does not exist",
                                            std::filesystem::path(path).is_relative()
                                                ? ResolvedAgainstWorkingDirectory()
                                                : std::string()));
  }
  if (!text.ok()) return text.status();
  return ParseJobConfig(*text, path, overrides, use);
}

namespace {

// Every string field the schema uses for a path, by field name.
bool IsPathField(const pb::FieldDescriptor& field) {
  static const std::set<std::string> kPathFields = {
      "dir",     "hf_dir", "export_hf_dir", "tensorboard_dir",      "metrics_file",
      "run_dir", "path",   "path_prefix",   "loss_mask_path_prefix"};
  return field.cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING && kPathFields.count(field.name());
}

void CollectRelativePaths(const pb::Message& message, std::vector<std::string>& paths) {
  const pb::Reflection& reflection = *message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      const int count = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
      for (int i = 0; i < count; ++i) {
        CollectRelativePaths(field->is_repeated() ? reflection.GetRepeatedMessage(message, field, i)
                                                  : reflection.GetMessage(message, field),
                             paths);
      }
    } else if (!field->is_repeated() && IsPathField(*field)) {
      const std::string value = reflection.GetString(message, field);
      if (!value.empty() && !std::filesystem::path(value).is_absolute()) paths.push_back(value);
    }
  }
}

}  // namespace

std::vector<std::string> RelativePathsOf(const config::JobConfig& job) {
  std::vector<std::string> paths;
  CollectRelativePaths(job, paths);
  return paths;
}

absl::Status WithWorkingDirectory(const absl::Status& status, const config::JobConfig& job) {
  return WithWorkingDirectory(status, RelativePathsOf(job));
}

absl::Status WithWorkingDirectory(const absl::Status& status,
                                  const std::vector<std::string>& paths) {
  if (status.ok()) return status;
  const std::string_view message(status.message().data(), status.message().size());
  for (const std::string& path : paths) {
    if (path.empty() || std::filesystem::path(path).is_absolute()) continue;
    if (message.find(path) == std::string_view::npos) continue;
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), ResolvedAgainstWorkingDirectory()));
  }
  return status;
}

}  // namespace kelvin::launcher
