// checkpoint.json, the part file names and the checksums' text form.
#include "training/checkpoint/checkpoint_format.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/atomic_file.h"
#include "core/io/regular_file.h"
#include "core/io/strict_json.h"
#include "core/status.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexFile = "checkpoint.json";

// checkpoint.json's "loss_spike": {"recent_losses": [finite numbers >= 0, at most
// kMaxLossSpikeWindow], "skipped_steps": count, "skips_in_a_row": count}; anything else is an
// error naming the file.
absl::StatusOr<LossSpikeRecord> ParseLossSpikeRecord(const fs::path& path,
                                                     const nlohmann::json& json) {
  const auto damaged = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path.string(), ": \"loss_spike\" ", what,
                                            ": the index was edited or damaged; restore it, or "
                                            "delete the checkpoint's directory"));
  };
  if (!json.is_object()) return damaged("is not an object");
  LossSpikeRecord record;
  const auto losses = json.find("recent_losses");
  if (losses == json.end() || !losses->is_array() ||
      losses->size() > static_cast<size_t>(kMaxLossSpikeWindow)) {
    return damaged(
        absl::StrCat("has no \"recent_losses\" list of at most ", kMaxLossSpikeWindow, " numbers"));
  }
  for (const nlohmann::json& loss : *losses) {  // cross-entropies: finite and >= 0
    if (!loss.is_number() || !std::isfinite(loss.get<double>()) || loss.get<double>() < 0) {
      return damaged(absl::StrCat("holds the loss ", loss.dump(), ", not a finite number >= 0"));
    }
    record.recent_losses.push_back(loss.get<double>());
  }
  for (const auto& [key, count] : {std::pair{"skipped_steps", &record.skipped_steps},
                                   std::pair{"skips_in_a_row", &record.skips_in_a_row}}) {
    const auto found = json.find(key);
    if (found == json.end() || !found->is_number_integer() || found->get<int64_t>() < 0) {
      return damaged(absl::StrCat("has no count \"", key, "\""));
    }
    *count = found->get<int64_t>();
  }
  if (record.skips_in_a_row > record.skipped_steps) {
    return damaged(absl::StrCat("counts ", record.skips_in_a_row, " skips in a row of ",
                                record.skipped_steps, " skipped steps"));
  }
  return record;
}

// checkpoint.json's "base": {"source": string, "fingerprint": 8 hex digits}; anything else is an
// error naming the file.
absl::StatusOr<FrozenBaseRecord> ParseFrozenBaseRecord(const fs::path& path,
                                                       const nlohmann::json& json) {
  const auto source = json.is_object() ? json.find("source") : json.end();
  const auto fingerprint = json.is_object() ? json.find("fingerprint") : json.end();
  const std::optional<uint32_t> crc = fingerprint != json.end() && fingerprint->is_string()
                                          ? ParseChecksum(fingerprint->get<std::string>())
                                          : std::nullopt;
  if (source == json.end() || !source->is_string() || !crc.has_value()) {
    return absl::DataLossError(absl::StrCat(
        path.string(), ": \"base\" is ", json.dump(),
        ", not {\"source\": string, \"fingerprint\": 8 hex digits}: the index was edited or "
        "damaged; restore it, or delete the checkpoint's directory"));
  }
  return FrozenBaseRecord{source->get<std::string>(), *crc};
}

}  // namespace

std::string PartFileName(int rank, int parts) {
  return absl::StrFormat("part_%d_of_%d.safetensors", rank, parts);
}

std::string FormatChecksum(uint32_t crc) { return absl::StrFormat("%08x", crc); }

std::optional<uint32_t> ParseChecksum(const std::string& text) {
  if (text.size() != 8) return std::nullopt;
  uint32_t crc = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), crc, 16);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return crc;
}

absl::StatusOr<CheckpointIndex> ReadCheckpointIndex(const fs::path& checkpoint) {
  const fs::path path = checkpoint / kIndexFile;
  constexpr uint64_t kMaxIndexBytes = 1 << 24;  // a few KB; the data order holds the job's data
  const absl::StatusOr<std::string> text =
      io::ReadRegularFile(path.string(), "checkpoint index", kMaxIndexBytes);
  const absl::StatusOr<nlohmann::json> parsed =
      text.ok() ? io::ParseStrictJson(*text, path.string()) : text.status();
  const nlohmann::json json = parsed.ok() ? *parsed : nlohmann::json();
  const auto format = json.is_object() ? json.find("format") : json.end();
  const std::string written = format != json.end() && format->is_string() ? *format : "";
  const bool known = written == kCheckpointFormat || written == kCheckpointFormatWithoutIdentity;
  if (written.starts_with("kelvin-checkpoint-") && !known) {
    return absl::FailedPreconditionError(absl::StrCat(
        path.string(), " is a \"", written,
        "\" checkpoint, which another version of Kelvin wrote; ", "this one reads \"",
        kCheckpointFormat,
        "\": resume it with that version, or start afresh (checkpoint.resume=NEVER or another "
        "checkpoint.dir)"));
  }
  if (!parsed.ok() || !known) {
    return absl::DataLossError(
        absl::StrCat(parsed.ok() ? path.string() : std::string(parsed.status().message()),
                     parsed.ok() ? " is not a \"" : ": not a \"", kCheckpointFormat,
                     "\" index: not a complete Kelvin checkpoint (delete the directory, or point "
                     "checkpoint.dir elsewhere)"));
  }
  CheckpointIndex index;
  const auto count = [&](const char* key, int64_t least) -> absl::StatusOr<int64_t> {
    const auto found = json.find(key);
    if (found == json.end() || !found->is_number_integer() || found->get<int64_t>() < least) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": \"", key, "\" is missing or not a count >= ", least));
    }
    return found->get<int64_t>();
  };
  const auto string_field = [&](const char* key) -> absl::StatusOr<std::string> {
    const auto found = json.find(key);
    if (found == json.end() || !found->is_string()) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": \"", key, "\" is missing or not a string"));
    }
    return found->get<std::string>();
  };
  KELVIN_ASSIGN_OR_RETURN(index.steps_completed, count("step", 0));
  KELVIN_ASSIGN_OR_RETURN(index.optimizer_steps, count("optimizer_steps", 0));
  KELVIN_ASSIGN_OR_RETURN(const int64_t parts, count("parts", 1));
  if (parts > std::numeric_limits<int>::max()) {
    return absl::DataLossError(absl::StrCat(path.string(), ": \"parts\" is ", parts));
  }
  index.parts = static_cast<int>(parts);
  KELVIN_ASSIGN_OR_RETURN(index.job, string_field("job"));
  KELVIN_ASSIGN_OR_RETURN(index.layout, string_field("layout"));
  const auto data_order = json.find("data_order");
  if (data_order != json.end() && data_order->is_object()) {
    for (const auto& [setting, value] : data_order->items()) {
      if (value.is_string()) index.data_order[setting] = value.get<std::string>();
    }
  }
  const auto kelvin = json.find("kelvin");
  if (kelvin != json.end() && kelvin->is_string())
    index.kelvin_version = kelvin->get<std::string>();
  const auto libraries = json.find("libraries");
  if (libraries != json.end() && libraries->is_string())
    index.libraries = libraries->get<std::string>();
  if (written == kCheckpointFormat) {
    KELVIN_ASSIGN_OR_RETURN(index.run_id, string_field("run"));
  }
  const std::optional<int64_t> directory_step = StepOfDirectoryName(checkpoint.filename().string());
  if (directory_step.has_value() && *directory_step != index.steps_completed) {
    return absl::DataLossError(absl::StrCat(
        path.string(), " records step ", index.steps_completed, " but its directory is of step ",
        *directory_step,
        ": the directory was renamed or the index edited; restore its name, or delete it"));
  }
  const auto eval_loss = json.find("eval_loss");
  if (eval_loss != json.end()) {
    if (!eval_loss->is_number()) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": \"eval_loss\" is ", eval_loss->dump(), ", not a number"));
    }
    index.eval_loss = eval_loss->get<double>();
  }
  const auto loss_spike = json.find("loss_spike");
  if (loss_spike != json.end()) {
    KELVIN_ASSIGN_OR_RETURN(index.loss_spike, ParseLossSpikeRecord(path, *loss_spike));
  }
  const auto base = json.find("base");
  if (base != json.end()) {
    KELVIN_ASSIGN_OR_RETURN(index.base, ParseFrozenBaseRecord(path, *base));
  }
  return index;
}

absl::Status WriteCheckpointIndex(const fs::path& checkpoint, const CheckpointIndex& index) {
  nlohmann::json json = {
      {"format", kCheckpointFormat},   {"job", index.job},
      {"step", index.steps_completed}, {"optimizer_steps", index.optimizer_steps},
      {"layout", index.layout},        {"parts", index.parts},
      {"data_order", index.data_order}};
  if (index.eval_loss.has_value() && std::isfinite(*index.eval_loss)) {
    json["eval_loss"] = *index.eval_loss;  // JSON has no NaN or inf (they would read back as null)
  }
  json["kelvin"] = index.kelvin_version;
  json["run"] = index.run_id;
  json["libraries"] = index.libraries;
  if (index.loss_spike.has_value()) {
    json["loss_spike"] = {{"recent_losses", index.loss_spike->recent_losses},
                          {"skipped_steps", index.loss_spike->skipped_steps},
                          {"skips_in_a_row", index.loss_spike->skips_in_a_row}};
  }
  if (index.base.has_value()) {
    json["base"] = {{"source", index.base->source},
                    {"fingerprint", FormatChecksum(index.base->fingerprint)}};
  }
  return io::WriteFileAtomically((checkpoint / kIndexFile).string(), {json.dump(2) + "\n"});
}

std::string NewRunId() {
  std::random_device entropy;  // /dev/urandom
  std::mt19937_64 generator(
      (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return absl::StrFormat("%016x%016x", generator(), generator());
}

std::string StepDirectoryName(int64_t step) { return absl::StrFormat("step_%08d", step); }

std::optional<int64_t> StepOfDirectoryName(const std::string& name) {
  constexpr std::string_view kPrefix = "step_";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const std::string digits = name.substr(kPrefix.size());
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    return std::nullopt;
  }
  return step;
}

}  // namespace kelvin::training
