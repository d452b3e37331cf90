// JSON Lines fine-tuning samples into a Megatron indexed dataset and its loss mask (see
// jsonl_samples.h).
#include "data/sft/jsonl_samples.h"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/io/mapped_file.h"
#include "data/corpus/megatron_dataset_writer.h"
#include "data/sft/jsonl_sample_parser.h"

namespace kelvin::data {
namespace {

// Megatron-LM stores tokens as uint16 when the vocabulary is below this size, else int32.
constexpr int64_t kUInt16VocabLimit = 65500;

// Creates the directory of `prefix` when missing; `created` is then the outermost directory it
// made (empty when none).
absl::Status CreateOutputDirectory(const std::string& prefix, std::filesystem::path& created) {
  const std::filesystem::path directory = std::filesystem::path(prefix).parent_path();
  created.clear();
  std::error_code error;
  for (std::filesystem::path p = directory; !p.empty(); p = p.parent_path()) {
    const bool exists = std::filesystem::exists(p, error);
    if (error) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot look at '", p.string(),
                       "' for the output directory: ", error.message(), "; check its permissions"));
    }
    if (exists) break;
    created = p;
    if (p == p.parent_path()) break;
  }
  if (!created.empty()) std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the output directory '",
                                                    directory.string(), "': ", error.message()));
  }
  return absl::OkStatus();
}

// Removes the (empty) directories CreateOutputDirectory made for `prefix`, innermost first.
void RemoveCreatedDirectories(const std::string& prefix, const std::filesystem::path& created) {
  std::error_code ignored;
  for (std::filesystem::path p = std::filesystem::path(prefix).parent_path();
       std::filesystem::remove(p, ignored) && p != created; p = p.parent_path()) {
  }
}

// Non-blank lines read, then parsed at once in parallel (a parser per thread), then written in
// file order: the output and the first error reported do not depend on the thread count.
constexpr size_t kBatchLines = 2048;

struct ParsedLine {
  int64_t number = 0;     // in the file, from 1
  std::string_view text;  // in the mapped file
  JsonlSample sample;     // its vectors keep their capacity from batch to batch
  absl::Status status;
};

// Reads up to kBatchLines non-blank lines of `text` from `offset` (advanced) into `batch`;
// returns how many.
size_t ReadBatch(std::string_view text, size_t& offset, int64_t& line,
                 std::vector<ParsedLine>& batch) {
  size_t count = 0;
  while (count < batch.size() && offset < text.size()) {
    const size_t end = std::min(text.find('\n', offset), text.size());
    const std::string_view current = text.substr(offset, end - offset);
    offset = end + 1;
    ++line;
    if (current.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    batch[count].text = current;
    batch[count++].number = line;
  }
  return count;
}

void ParseBatch(const std::string& path, const TextSampleEncoder* text_encoder, size_t count,
                std::vector<ParsedLine>& batch) {
#pragma omp parallel
  {
    JsonlSampleParser parser(text_encoder);
#pragma omp for schedule(dynamic, 16)
    for (size_t i = 0; i < count; ++i) {
      ParsedLine& l = batch[i];
      l.status = parser.Parse(l.text, path, l.number);
      if (l.status.ok()) parser.SwapSample(l.sample);
    }
  }
}

// Appends one sample to both datasets (a sample without labels or loss_mask trains on all its
// tokens), counting into `prepared`; `all_targets` is scratch, `lengths` gets its length.
absl::Status WriteSample(const JsonlSample& sample, MegatronDatasetWriter& tokens,
                         MegatronDatasetWriter& mask, PreparedSamples& prepared, bool& any_mask,
                         std::vector<int64_t>& all_targets, std::vector<int64_t>& lengths) {
  ++prepared.samples;
  lengths.push_back(static_cast<int64_t>(sample.tokens.size()));
  for (const std::string& key : sample.ignored_keys) ++prepared.ignored_keys[key];
  any_mask = any_mask || !sample.targets.empty();
  if (sample.targets.empty()) all_targets.assign(sample.tokens.size(), 1);
  const std::vector<int64_t>& targets = sample.targets.empty() ? all_targets : sample.targets;
  for (const int64_t target : targets) prepared.targets += target;
  KELVIN_RETURN_IF_ERROR(tokens.AddSequence(sample.tokens));
  tokens.EndDocument();
  KELVIN_RETURN_IF_ERROR(mask.AddSequence(targets));
  mask.EndDocument();
  return absl::OkStatus();
}

// Writes every sample of `jsonl_path` into `tokens` (int32) and `mask`, counting into `prepared`.
absl::Status WriteSamples(const std::string& jsonl_path, const TextSampleEncoder* text_encoder,
                          MegatronDatasetWriter& tokens, MegatronDatasetWriter& mask,
                          PreparedSamples& prepared, bool& any_mask) {
  KELVIN_ASSIGN_OR_RETURN(const io::MappedFile file,
                          io::MappedFile::Open(jsonl_path, "samples file"));
  const std::string_view text(file.data(), file.size());
  size_t offset = 0;
  std::vector<ParsedLine> batch(kBatchLines);
  std::vector<int64_t> all_targets;  // [n] ones, for a sample without a mask
  std::vector<int64_t> lengths;      // [samples]
  int64_t line = 0;
  for (size_t count; (count = ReadBatch(text, offset, line, batch)) > 0;) {
    ParseBatch(jsonl_path, text_encoder, count, batch);
    for (size_t i = 0; i < count; ++i) {
      KELVIN_RETURN_IF_ERROR(batch[i].status);
      KELVIN_RETURN_IF_ERROR(
          WriteSample(batch[i].sample, tokens, mask, prepared, any_mask, all_targets, lengths));
    }
  }
  prepared.tokens = tokens.num_tokens();
  prepared.max_token = tokens.max_token();
  if (prepared.samples == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the samples file '", jsonl_path, "' has no sample (no non-blank line)"));
  }
  if (prepared.targets == 0) {  // training on it would learn nothing (the trainer refuses it too)
    return absl::InvalidArgumentError(absl::StrCat(
        "the samples file '", jsonl_path, "': none of its ", prepared.samples,
        " samples has a training target (every label is -100): mark the tokens to learn (the "
        "answers) with their ids in \"labels\", or leave \"labels\" out to learn every token"));
  }
  prepared.lengths = SummarizeLengths(std::move(lengths));
  return absl::OkStatus();
}

// Everything but the directory: the writers remove their temporaries on an error.
absl::Status Prepare(const std::string& jsonl_path, const TextSampleEncoder* text_encoder,
                     PreparedSamples& prepared) {
  const std::string& prefix = prepared.tokens_prefix;
  KELVIN_ASSIGN_OR_RETURN(MegatronDatasetWriter tokens,
                          MegatronDatasetWriter::Create(prefix, TokenType::kInt32));
  KELVIN_ASSIGN_OR_RETURN(MegatronDatasetWriter mask,
                          MegatronDatasetWriter::Create(prefix + "_loss_mask", TokenType::kUInt8));
  bool any_mask = false;
  KELVIN_RETURN_IF_ERROR(WriteSamples(jsonl_path, text_encoder, tokens, mask, prepared, any_mask));
  prepared.token_type =
      prepared.max_token < kUInt16VocabLimit ? TokenType::kUInt16 : TokenType::kInt32;
  // Both datasets whole before either is committed.
  KELVIN_RETURN_IF_ERROR(tokens.FinishAs(prepared.token_type));
  if (any_mask) {
    prepared.loss_mask_prefix = prefix + "_loss_mask";
    KELVIN_RETURN_IF_ERROR(mask.Finish());
  }
  if (any_mask) return MegatronDatasetWriter::CommitTogether({&tokens, &mask});
  KELVIN_RETURN_IF_ERROR(tokens.Commit());
  // An earlier run's mask under this prefix would pair with the new tokens.
  std::error_code ignored;
  for (const char* extension : {".bin", ".idx"}) {
    if (std::filesystem::remove(prefix + "_loss_mask" + extension, ignored)) {
      prepared.removed_stale_mask = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string OutputPrefixProblem(const std::string& output_prefix) {
  const std::string name = std::filesystem::path(output_prefix).filename().string();
  if (!name.empty() && name != "." && name != "..") return "";
  return "names no file: give a path prefix such as data/sft/train (prepare-data writes "
         "PREFIX.bin, PREFIX.idx and PREFIX_loss_mask.bin/.idx)";
}

absl::StatusOr<PreparedSamples> PrepareJsonlSamples(const std::string& jsonl_path,
                                                    const std::string& output_prefix,
                                                    const TextSampleEncoder* text_encoder) {
  if (const std::string problem = OutputPrefixProblem(output_prefix); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--out \"", output_prefix, "\" ", problem));
  }
  for (const char* output : {".bin", ".idx", "_loss_mask.bin", "_loss_mask.idx"}) {
    std::error_code error;  // none where the output does not exist yet
    const std::string path = output_prefix + output;
    if (std::filesystem::equivalent(jsonl_path, path, error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--out \"", output_prefix, "\" would write ", path, ", which is the samples file '",
          jsonl_path, "' itself: choose another prefix"));
    }
  }
  PreparedSamples prepared;
  prepared.tokens_prefix = output_prefix;
  std::filesystem::path created_directory;
  KELVIN_RETURN_IF_ERROR(CreateOutputDirectory(output_prefix, created_directory));
  const absl::Status status = Prepare(jsonl_path, text_encoder, prepared);
  if (!status.ok()) {
    if (!created_directory.empty()) RemoveCreatedDirectories(output_prefix, created_directory);
    return status;
  }
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
  absl::StrAppend(&text, "  ", FormatLengthSummary(p.lengths),
                  " (packing: DOCUMENTS keeps the first seq_length tokens of a longer sample)\n");
  if (p.removed_stale_mask) {
    absl::StrAppend(&text, "  removed ", p.tokens_prefix,
                    "_loss_mask.bin/.idx, an earlier run's mask that does not fit these samples\n");
  }
  if (!p.ignored_keys.empty()) {
    // Keys as escaped strings (a NUL or a newline would cut or break the line), the first
    // kListedKeys of them, each at most kKeyChars long.
    constexpr size_t kListedKeys = 20, kKeyChars = 64;
    std::vector<std::string> keys;
    for (const auto& [key, lines] : p.ignored_keys) {
      if (keys.size() == kListedKeys) break;
      const bool long_key = key.size() > kKeyChars;
      keys.push_back(
          absl::StrFormat("\"%s\"%s (%d lines)", absl::Utf8SafeCEscape(key.substr(0, kKeyChars)),
                          long_key ? absl::StrCat("... (", key.size(), " bytes)") : "", lines));
    }
    if (p.ignored_keys.size() > kListedKeys) {
      keys.push_back(absl::StrCat("and ", p.ignored_keys.size() - kListedKeys, " more"));
    }
    absl::StrAppend(&text, "  ignored keys: ", absl::StrJoin(keys, ", "), "\n");
  }
  // The prefixes as textproto strings (escaped), so the section pastes into a job as it is.
  absl::StrAppendFormat(&text, "train on it with (the model's vocab_size must be above %d):\n",
                        p.max_token);
  absl::StrAppendFormat(&text, "  data {\n    megatron {\n      path_prefix: \"%s\"\n",
                        absl::Utf8SafeCEscape(p.tokens_prefix));
  if (!p.loss_mask_prefix.empty()) {
    absl::StrAppendFormat(&text, "      loss_mask_path_prefix: \"%s\"\n",
                          absl::Utf8SafeCEscape(p.loss_mask_prefix));
  }
  absl::StrAppend(&text, "    }\n    packing: DOCUMENTS\n    document_masking: true\n  }\n");
  return text;
}

}  // namespace kelvin::data
