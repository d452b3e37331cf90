// JSON Lines fine-tuning samples into a Megatron indexed dataset and its loss mask (see
// jsonl_samples.h).
#include "core/data/jsonl_samples.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/data/megatron_dataset_writer.h"
#include "core/ops/cross_entropy.h"
#include "nlohmann/json.hpp"

namespace kelvin::data {
namespace {

using nlohmann::json;

// Megatron-LM stores tokens as uint16 when the vocabulary is below this size, else int32.
constexpr int64_t kUInt16VocabLimit = 65500;

struct Sample {
  std::vector<int64_t> tokens;   // [n]
  std::vector<int64_t> targets;  // [n] 0/1, or empty when the line has no labels / loss_mask
  std::vector<std::string> ignored_keys;
};

// "FILE:LINE: detail" as an InvalidArgument status.
absl::Status LineError(const std::string& path, int64_t line, absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", detail));
}

// The integers of array `key` of `object`, each checked by `valid` (which names the rule).
absl::StatusOr<std::vector<int64_t>> IntegerArray(const json& object, const char* key,
                                                  const std::string& path, int64_t line,
                                                  bool (*valid)(int64_t), const char* rule) {
  const json& array = object.at(key);
  if (!array.is_array()) {
    return LineError(
        path, line,
        absl::StrCat("\"", key, "\" is ", array.type_name(), ", not an array of integers"));
  }
  std::vector<int64_t> values;  // [n]
  values.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const json& value = array[i];
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() &&
         value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
        !valid(value.get<int64_t>())) {
      return LineError(path, line,
                       absl::StrCat("\"", key, "\"[", i, "] is ", value.dump(), ": ", rule));
    }
    values.push_back(value.get<int64_t>());
  }
  return values;
}

absl::StatusOr<Sample> ParseSample(const std::string& text, const std::string& path, int64_t line) {
  const json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) {
    return LineError(path, line, "not valid JSON (each line must be one JSON object)");
  }
  if (!object.is_object()) {
    return LineError(
        path, line,
        absl::StrCat("a JSON ", object.type_name(), ", not an object with \"input_ids\""));
  }
  if (!object.contains("input_ids")) {
    return LineError(path, line, "no \"input_ids\": each sample needs its token ids");
  }
  if (object.contains("labels") && object.contains("loss_mask")) {
    return LineError(path, line, "both \"labels\" and \"loss_mask\": give one of them");
  }
  Sample sample;
  KELVIN_ASSIGN_OR_RETURN(
      sample.tokens,
      IntegerArray(
          object, "input_ids", path, line,
          [](int64_t id) { return id >= 0 && id <= std::numeric_limits<int32_t>::max(); },
          "token ids are integers in [0, 2^31)"));
  if (sample.tokens.empty()) return LineError(path, line, "\"input_ids\" is empty");
  const size_t n = sample.tokens.size();
  if (object.contains("labels")) {
    KELVIN_ASSIGN_OR_RETURN(const std::vector<int64_t> labels,
                            IntegerArray(
                                object, "labels", path, line, [](int64_t) { return true; }, ""));
    if (labels.size() != n) {
      return LineError(
          path, line,
          absl::StrCat("\"labels\" has ", labels.size(), " entries but \"input_ids\" has ", n));
    }
    for (size_t i = 0; i < n; ++i) {
      if (labels[i] != ops::kIgnoreIndex && labels[i] != sample.tokens[i]) {
        return LineError(
            path, line,
            absl::StrCat("\"labels\"[", i, "] is ", labels[i], " but \"input_ids\"[", i, "] is ",
                         sample.tokens[i],
                         ": labels must be the input_ids themselves where the token is a training "
                         "target and -100 where it is not (Hugging Face's unshifted labels)"));
      }
      sample.targets.push_back(labels[i] == ops::kIgnoreIndex ? 0 : 1);
    }
  } else if (object.contains("loss_mask")) {
    KELVIN_ASSIGN_OR_RETURN(
        sample.targets,
        IntegerArray(
            object, "loss_mask", path, line, [](int64_t value) { return value == 0 || value == 1; },
            "a loss mask holds 1 (training target) or 0 (no loss)"));
    if (sample.targets.size() != n) {
      return LineError(path, line,
                       absl::StrCat("\"loss_mask\" has ", sample.targets.size(),
                                    " entries but \"input_ids\" has ", n));
    }
  }
  for (const auto& item : object.items()) {
    if (item.key() != "input_ids" && item.key() != "labels" && item.key() != "loss_mask") {
      sample.ignored_keys.push_back(item.key());
    }
  }
  return sample;
}

// Calls `use(sample)` for every sample of the file, in order; stops at the first error.
template <typename Use>
absl::Status ForEachSample(const std::string& path, Use use) {
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::NotFoundError(
        absl::StrCat("cannot open the samples file '", path, "': check the path"));
  }
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    KELVIN_ASSIGN_OR_RETURN(Sample sample, ParseSample(text, path, line));
    KELVIN_RETURN_IF_ERROR(use(sample));
  }
  if (in.bad()) return absl::InternalError(absl::StrCat("reading '", path, "' failed"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedSamples> PrepareJsonlSamples(const std::string& jsonl_path,
                                                    const std::string& output_prefix) {
  PreparedSamples prepared;
  prepared.tokens_prefix = output_prefix;
  bool any_mask = false;
  KELVIN_RETURN_IF_ERROR(ForEachSample(jsonl_path, [&](const Sample& sample) {
    ++prepared.samples;
    prepared.tokens += static_cast<int64_t>(sample.tokens.size());
    for (const int64_t token : sample.tokens)
      prepared.max_token = std::max(prepared.max_token, token);
    for (const std::string& key : sample.ignored_keys) ++prepared.ignored_keys[key];
    any_mask = any_mask || !sample.targets.empty();
    return absl::OkStatus();
  }));
  if (prepared.samples == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the samples file '", jsonl_path, "' has no sample (no non-blank line)"));
  }
  prepared.token_type =
      prepared.max_token < kUInt16VocabLimit ? TokenType::kUInt16 : TokenType::kInt32;
  const std::filesystem::path directory = std::filesystem::path(output_prefix).parent_path();
  std::error_code error;
  if (!directory.empty()) std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the output directory '",
                                                    directory.string(), "': ", error.message()));
  }
  KELVIN_ASSIGN_OR_RETURN(MegatronDatasetWriter tokens,
                          MegatronDatasetWriter::Create(output_prefix, prepared.token_type));
  std::optional<MegatronDatasetWriter> mask;
  if (any_mask) {
    prepared.loss_mask_prefix = output_prefix + "_loss_mask";
    absl::StatusOr<MegatronDatasetWriter> created =
        MegatronDatasetWriter::Create(prepared.loss_mask_prefix, TokenType::kUInt8);
    if (!created.ok()) return created.status();
    mask.emplace(std::move(created).value());
  }
  int64_t written_samples = 0;
  KELVIN_RETURN_IF_ERROR(ForEachSample(jsonl_path, [&](const Sample& sample) {
    ++written_samples;
    KELVIN_RETURN_IF_ERROR(tokens.AddSequence(sample.tokens));
    tokens.EndDocument();
    const std::vector<int64_t> all(sample.tokens.size(), 1);  // a sample without a mask
    const std::vector<int64_t>& targets = sample.targets.empty() ? all : sample.targets;
    for (const int64_t target : targets) prepared.targets += target;
    if (mask.has_value()) {
      KELVIN_RETURN_IF_ERROR(mask->AddSequence(targets));
      mask->EndDocument();
    }
    return absl::OkStatus();
  }));
  if (tokens.num_tokens() != prepared.tokens || written_samples != prepared.samples) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the samples file '", jsonl_path, "' changed while it was read: ", prepared.samples,
        " samples of ", prepared.tokens, " tokens the first time, ", written_samples, " of ",
        tokens.num_tokens(), " the second; nothing was written"));
  }
  // Both datasets whole before either is committed.
  KELVIN_RETURN_IF_ERROR(tokens.Finish());
  if (mask.has_value()) KELVIN_RETURN_IF_ERROR(mask->Finish());
  if (!mask.has_value()) {  // an earlier run's mask under this prefix would pair with new tokens
    for (const char* extension : {".bin", ".idx"}) {
      const std::string stale = output_prefix + "_loss_mask" + extension;
      if (std::filesystem::remove(stale, error)) prepared.removed_stale_mask = true;
    }
  }
  KELVIN_RETURN_IF_ERROR(tokens.Commit());
  if (mask.has_value()) KELVIN_RETURN_IF_ERROR(mask->Commit());
  return prepared;
}

std::string DescribePreparedSamples(const PreparedSamples& p) {
  std::string text = absl::StrFormat(
      "wrote %s.bin and .idx: %d samples (one document each), %d tokens (%s, the largest id %d)\n",
      p.tokens_prefix, p.samples, p.tokens, TokenTypeName(p.token_type), p.max_token);
  const double share = 100.0 * static_cast<double>(p.targets) / static_cast<double>(p.tokens);
  if (!p.loss_mask_prefix.empty()) {
    absl::StrAppendFormat(&text,
                          "  and %s.bin and .idx: %d of the tokens (%.1f%%) are training targets\n",
                          p.loss_mask_prefix, p.targets, share);
  } else {
    absl::StrAppend(&text, "  no sample has labels or a loss_mask: every token is a target\n");
  }
  if (p.removed_stale_mask) {
    absl::StrAppend(&text, "  removed ", p.tokens_prefix,
                    "_loss_mask.bin/.idx, an earlier run's mask that does not fit these samples\n");
  }
  if (!p.ignored_keys.empty()) {
    std::vector<std::string> keys;
    for (const auto& [key, lines] : p.ignored_keys) {
      keys.push_back(absl::StrFormat("\"%s\" (%d lines)", key, lines));
    }
    absl::StrAppend(&text, "  ignored keys: ", absl::StrJoin(keys, ", "), "\n");
  }
  absl::StrAppendFormat(&text, "train on it with (the model's vocab_size must be above %d):\n",
                        p.max_token);
  absl::StrAppendFormat(&text, "  data {\n    megatron {\n      path_prefix: \"%s\"\n",
                        p.tokens_prefix);
  if (!p.loss_mask_prefix.empty()) {
    absl::StrAppendFormat(&text, "      loss_mask_path_prefix: \"%s\"\n", p.loss_mask_prefix);
  }
  absl::StrAppend(&text, "    }\n    packing: DOCUMENTS\n    document_masking: true\n  }\n");
  return text;
}

}  // namespace kelvin::data
