// The corpus read whole (or the text encoded), then ScoreTokens with the job's model.
#include "launcher/commands/score_command.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/regular_file.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "data/corpus/token_file.h"
#include "data/tokenizer/tokenizer.h"
#include "launcher/commands/inference_model.h"
#include "models/llama/llama_decoder.h"

namespace kelvin::launcher {
namespace {

constexpr int64_t kDefaultWindow = 2048;
constexpr int64_t kMaxScoredTokens = int64_t{1} << 31;

absl::StatusOr<std::vector<int32_t>> CorpusTokens(const std::string& path) {
  std::error_code error;
  absl::StatusOr<data::TokenCorpus> corpus;
  if (std::filesystem::exists(path + ".idx", error)) {
    corpus = data::OpenMegatronDataset(path);
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
  return std::vector<int32_t>(wide.begin(), wide.end());
}

absl::StatusOr<std::vector<int32_t>> TextTokens(const config::JobConfig& job,
                                                const std::string& path) {
  if (!job.model().has_hf_dir()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--text ", path, " needs the model's tokenizer: the job has no model.hf_dir"));
  }
  KELVIN_ASSIGN_OR_RETURN(const data::Tokenizer tokenizer,
                          data::Tokenizer::FromDirectory(job.model().hf_dir()));
  KELVIN_ASSIGN_OR_RETURN(const std::string text,
                          io::ReadRegularFile(path, "text to score", kMaxScoredTokens));
  std::vector<int32_t> ids;
  const absl::Status encoded = tokenizer.Encode(text, /*add_special_tokens=*/true, ids);
  if (!encoded.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", encoded.message()));
  return ids;
}

}  // namespace

config::JobConfig JobOfModelDirectory(const std::string& directory) {
  config::JobConfig job;
  job.set_name(std::filesystem::path(directory).lexically_normal().filename().string());
  job.mutable_model()->set_hf_dir(directory);
  return job;
}

absl::StatusOr<ScoreReport> ScoreData(const config::JobConfig& job, const ScoreOptions& options,
                                      const training::TrainingPlacement& placement,
                                      parallel::Communicator* tp) {
  if (options.data.empty() == options.text.empty()) {
    return absl::InvalidArgumentError("scoring takes one of --data PATH and --text FILE");
  }
  KELVIN_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, options.text.empty()
                                                                 ? CorpusTokens(options.data)
                                                                 : TextTokens(job, options.text));
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
  const int64_t max_positions = model->config().max_position_embeddings;
  ScoreReport report;
  report.source = options.text.empty() ? options.data : options.text;
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
  KELVIN_ASSIGN_OR_RETURN(
      models::LlamaDecoder decoder,
      models::LlamaDecoder::Create(*model, std::min(report.seq_length, max_positions)));
  KELVIN_ASSIGN_OR_RETURN(report.result,
                          models::ScoreTokens(decoder, tokens, report.seq_length, report.stride));
  return report;
}

std::string FormatScore(const config::JobConfig& job, const ScoreReport& r) {
  return absl::StrFormat(
      "score of %s on %s | loss %.9f | perplexity %.6g | %d tokens in %d windows of %d (stride %d)",
      job.name(), r.source, r.result.loss(), std::exp(r.result.loss()), r.result.targets,
      r.result.windows, r.seq_length, r.stride);
}

std::string ScoreJson(const config::JobConfig& job, const ScoreReport& r) {
  const nlohmann::ordered_json root = {
      {"model", job.name()},         {"data", r.source},
      {"seq_length", r.seq_length},  {"stride", r.stride},
      {"windows", r.result.windows}, {"tokens", r.result.targets},
      {"loss", r.result.loss()},     {"perplexity", std::exp(r.result.loss())}};
  return root.dump(2) + "\n";
}

}  // namespace kelvin::launcher
