// The corpus read whole (or the text encoded), then ScoreTokens on the job's forward-only model.
#include "inference/corpus_score.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/regular_file.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "data/corpus/token_file.h"
#include "data/tokenizer/tokenizer.h"
#include "inference/forward_model.h"

namespace kelvin::inference {
namespace {

constexpr int64_t kDefaultWindow = 2048;
constexpr int64_t kMaxScoredTokens = int64_t{1} << 31;

// The corpus's tokens, and for a Megatron prefix with a PREFIX_loss_mask beside it (prepare-data
// writes one for fine-tuning data) which of them are targets.
struct ScoredTokens {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> is_target;  // [tokens.size()], or empty: every token
  std::string loss_mask;           // the mask's prefix, "" without one
};

absl::StatusOr<ScoredTokens> CorpusTokens(const std::string& path) {
  std::error_code error;
  absl::StatusOr<data::TokenCorpus> corpus;
  ScoredTokens scored;
  if (std::filesystem::exists(path + ".idx", error)) {
    corpus = data::OpenMegatronDataset(path);
    if (corpus.ok() && std::filesystem::exists(path + "_loss_mask.idx", error)) {
      scored.loss_mask = path + "_loss_mask";
      absl::StatusOr<data::TokenCorpus> mask = data::OpenMegatronDataset(scored.loss_mask);
      if (!mask.ok()) return mask.status();
      KELVIN_RETURN_IF_ERROR(corpus->AttachLossMask(*std::move(mask)));
    }
  } else if (!std::filesystem::exists(path, error)) {
    return absl::NotFoundError(absl::StrCat("--data ", path, ": no such file, and no ", path,
                                            ".bin/.idx Megatron dataset"));
  } else {
    const absl::StatusOr<data::TokenType> type = data::FlatTokenTypeFromPath(path);
    if (!type.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data ", path,
                       ": a token file's name gives its type (.int32 or .i32, .uint16 or "
                       ".u16); rename it, or give a Megatron prefix (PREFIX for PREFIX.bin/.idx)"));
    }
    corpus = data::OpenTokenFile(path, *type);
  }
  if (!corpus.ok()) return corpus.status();
  if (corpus->num_tokens() > kMaxScoredTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--data ", path, " has ", corpus->num_tokens(),
                                                   " tokens, more than the ", kMaxScoredTokens,
                                                   " one run scores: split it"));
  }
  std::vector<int64_t> wide(static_cast<size_t>(corpus->num_tokens()));
  corpus->Read(0, wide);
  scored.tokens.assign(wide.begin(), wide.end());
  if (corpus->has_loss_mask()) {
    scored.is_target.resize(wide.size());
    KELVIN_RETURN_IF_ERROR(corpus->ReadLossMask(0, scored.is_target));
  }
  return scored;
}

absl::StatusOr<ScoredTokens> TextTokens(const config::JobConfig& job, const ScoreOptions& options) {
  const std::string& path = options.text;
  KELVIN_ASSIGN_OR_RETURN(const std::optional<data::Tokenizer> tokenizer,
                          LoadModelTokenizer(job, options.tokenizer, absl::StrCat("--text ", path),
                                             "score token ids with --data PATH"));
  KELVIN_ASSIGN_OR_RETURN(const std::string text,
                          io::ReadRegularFile(path, "text to score", kMaxScoredTokens));
  ScoredTokens scored;
  const absl::Status encoded = tokenizer->Encode(text, /*add_special_tokens=*/true, scored.tokens);
  if (!encoded.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", encoded.message()));
  return scored;
}

}  // namespace

absl::StatusOr<ScoreReport> ScoreData(const config::JobConfig& job, const ScoreOptions& options,
                                      const training::TrainingPlacement& placement,
                                      parallel::Communicator* tp) {
  if (options.data.empty() == options.text.empty()) {
    return absl::InvalidArgumentError("scoring takes one of --data PATH and --text FILE");
  }
  KELVIN_ASSIGN_OR_RETURN(const ScoredTokens scored, options.text.empty()
                                                         ? CorpusTokens(options.data)
                                                         : TextTokens(job, options));
  const std::vector<int32_t>& tokens = scored.tokens;
  // The corpus as the command line named it, for errors: "--data PATH" or "--text FILE".
  const std::string named = options.text.empty() ? absl::StrCat("--data ", options.data)
                                                 : absl::StrCat("--text ", options.text);
  if (tokens.size() < 2) {  // before the model is loaded
    return absl::InvalidArgumentError(absl::StrCat(
        named, ": holds ", tokens.size(), " token", tokens.size() == 1 ? "" : "s",
        "; scoring needs at least 2 (a token and the next one it predicts): give a longer corpus"));
  }
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<models::LlamaModel> model,
                          LoadInferenceModel(job, options.checkpoint, placement, tp));
  const int64_t max_positions = model->config().PositionLimit();
  ScoreReport report;
  report.source = options.text.empty() ? options.data : options.text;
  report.loss_mask = scored.loss_mask;
  // Every id checked before the first window, not when scoring reaches it.
  const int64_t vocab = model->config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= 0 && tokens[i] < vocab) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        named, ": token ", i, " is ", tokens[i], ", outside the model's vocabulary [0, ", vocab,
        "): it was tokenized for another model; score it with that model"));
  }
  report.seq_length = options.seq_length > 0            ? options.seq_length
                      : job.training().seq_length() > 0 ? job.training().seq_length()
                                                        : std::min(kDefaultWindow, max_positions);
  report.stride = options.stride > 0 ? options.stride : report.seq_length;
  std::vector<int64_t> bucket_starts;  // [buckets]
  if (options.by_position.has_value()) {
    KELVIN_ASSIGN_OR_RETURN(bucket_starts,
                            PositionBucketStarts(*options.by_position, report.seq_length));
  }
  KELVIN_ASSIGN_OR_RETURN(report.result, ScoreTokens(*model, tokens, report.seq_length,
                                                     report.stride, scored.is_target));
  if (!bucket_starts.empty()) {
    report.by_position = LossByPosition(report.result, bucket_starts);
  }
  if (report.result.targets == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        named, ": its loss mask ", scored.loss_mask,
        " marks no token after the first as a target: nothing to score; remove the mask to score "
        "every token"));
  }
  return report;
}

std::string FormatScore(const config::JobConfig& job, const ScoreReport& r) {
  const std::string counted =
      r.loss_mask.empty() ? absl::StrCat(r.result.targets, " tokens")
                          : absl::StrCat(r.result.targets, " targets of ", r.result.predicted,
                                         " tokens (the loss mask ", r.loss_mask, ")");
  return absl::StrFormat(
      "score of %s on %s | loss %.9f | perplexity %.6g | %s in %d windows of %d (stride %d)",
      job.name(), r.source, r.result.loss(), std::exp(r.result.loss()), counted, r.result.windows,
      r.seq_length, r.stride);
}

std::string FormatLossByPosition(const config::JobConfig& job, const ScoreReport& r) {
  std::string table = absl::StrFormat(
      "loss of %s on %s by position in the window (windows of %d, stride %d; position p has seen "
      "p + 1 tokens)\n%16s %10s %12s %12s\n",
      job.name(), r.source, r.seq_length, r.stride, "positions", "targets", "loss", "perplexity");
  for (const PositionBucket& bucket : r.by_position) {
    const std::string positions = absl::StrFormat("[%d, %d)", bucket.begin, bucket.end);
    if (bucket.targets == 0) {
      absl::StrAppendFormat(&table, "%16s %10d %12s %12s\n", positions, 0, "-", "-");
    } else {
      absl::StrAppendFormat(&table, "%16s %10d %12.6f %12.6g\n", positions, bucket.targets,
                            bucket.loss(), std::exp(bucket.loss()));
    }
  }
  return table;
}

std::string ScoreJson(const config::JobConfig& job, const ScoreReport& r) {
  nlohmann::ordered_json root = {{"model", job.name()},
                                 {"data", r.source},
                                 {"seq_length", r.seq_length},
                                 {"stride", r.stride},
                                 {"windows", r.result.windows},
                                 {"tokens", r.result.predicted},
                                 {"targets", r.result.targets},
                                 {"loss", r.result.loss()},
                                 {"perplexity", std::exp(r.result.loss())}};
  if (!r.loss_mask.empty()) root["loss_mask"] = r.loss_mask;
  if (!r.by_position.empty()) {
    nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
    for (const PositionBucket& bucket : r.by_position) {
      const bool scored = bucket.targets > 0;
      buckets.push_back(
          {{"begin", bucket.begin},
           {"end", bucket.end},
           {"targets", bucket.targets},
           {"loss", scored ? nlohmann::ordered_json(bucket.loss()) : nullptr},
           {"perplexity", scored ? nlohmann::ordered_json(std::exp(bucket.loss())) : nullptr}});
    }
    root["by_position"] = buckets;
  }
  return root.dump(2) + "\n";
}

}  // namespace kelvin::inference
