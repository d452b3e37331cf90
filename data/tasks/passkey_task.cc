// The passkey-retrieval task (see passkey_task.h).
#include "data/tasks/passkey_task.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/ops/cross_entropy.h"
#include "data/sampling/random.h"
#include "data/tasks/haystack.h"

namespace kelvin::data {
namespace {

void AppendText(std::vector<int32_t>& tokens, std::string_view text) {
  for (const char c : text) tokens.push_back(static_cast<unsigned char>(c));
}

}  // namespace

std::string PasskeySentence(int32_t key) {
  return absl::StrFormat("The pass key is %d. Remember it. %d is the pass key. ", key, key);
}

std::string DistractorSentence(int32_t code) {
  return absl::StrFormat("The door code is %d. Remember it. %d is the door code. ", code, code);
}

int64_t MinPasskeySequenceLength(int64_t distractors) {
  // Every key and code has 5 digits: the sentences of one are as long as any.
  const auto fixed = static_cast<int64_t>(1 + PasskeySentence(10000).size() +
                                          distractors * DistractorSentence(10000).size() +
                                          kPasskeyQuestion.size() + kPasskeyDigits);
  return fixed - 1;  // a sample is T + 1 tokens
}

PasskeySample MakePasskeySample(uint64_t seed, int64_t index, int64_t sequence_length,
                                const DepthRange& depths, int64_t distractors) {
  KELVIN_CHECK_GE(distractors, 0);
  KELVIN_CHECK_GE(sequence_length, MinPasskeySequenceLength(distractors));
  KELVIN_CHECK_GE(index, 0);
  std::mt19937_64 rng(MixSeed(seed, static_cast<uint64_t>(index)));
  PasskeySample sample;
  sample.key = DrawFiveDigits(rng);
  const int64_t filler_budget = sequence_length - MinPasskeySequenceLength(distractors);
  const std::vector<int64_t> boundaries = FillerBoundaries(filler_budget);
  const int64_t filler_bytes = boundaries.back();  // W
  const int64_t insert_at = DrawBoundary(rng, boundaries, depths);
  sample.depth = filler_bytes > 0 ? static_cast<double>(insert_at) / filler_bytes : 0.0;
  // The sentences hidden in the filler, (boundary, text) in the order they are written: at one
  // boundary the key comes first. Decoys are drawn after the key, so none changes its samples.
  struct Hidden {
    int64_t boundary;
    std::string text;
    bool is_key;
  };
  std::vector<Hidden> hidden = {{insert_at, PasskeySentence(sample.key), true}};
  for (int64_t i = 0; i < distractors; ++i) {
    int32_t code = DrawFiveDigits(rng);
    while (code == sample.key) code = DrawFiveDigits(rng);
    hidden.push_back(
        {boundaries[UniformBelow(rng, boundaries.size())], DistractorSentence(code), false});
  }
  std::stable_sort(hidden.begin(), hidden.end(),
                   [](const Hidden& a, const Hidden& b) { return a.boundary < b.boundary; });

  std::vector<int32_t>& tokens = sample.tokens;
  tokens.reserve(sequence_length + 1);
  tokens.push_back(kByteBos);
  int64_t filler_at = 0;
  for (const Hidden& sentence : hidden) {
    AppendText(tokens, FillerText(filler_at, sentence.boundary));
    filler_at = sentence.boundary;
    if (sentence.is_key) sample.key_position = static_cast<int64_t>(tokens.size());
    AppendText(tokens, sentence.text);
  }
  AppendText(tokens, FillerText(filler_at, filler_bytes));
  tokens.resize(tokens.size() + (filler_budget - filler_bytes), ' ');
  AppendText(tokens, kPasskeyQuestion);
  AppendText(tokens, absl::StrCat(sample.key));
  KELVIN_CHECK_EQ(static_cast<int64_t>(tokens.size()), sequence_length + 1);
  return sample;
}

std::vector<int32_t> TextToByteTokens(std::string_view text) {
  std::vector<int32_t> tokens;
  AppendText(tokens, text);
  return tokens;
}

std::string ByteTokensToText(std::span<const int32_t> tokens) {
  std::string text;
  for (const int32_t token : tokens) {
    KELVIN_CHECK(token >= 0 && token <= kByteBos) << "not a byte token: " << token;
    if (token == kByteBos) {
      text += "<s>";
    } else {
      text.push_back(static_cast<char>(token));
    }
  }
  return text;
}

int64_t PasskeySampleLength(const PasskeyOptions& options, int64_t index) {
  if (options.min_length == 0) return options.sequence_length;
  // Stream 2^63 + index of the seed: apart from the samples' own streams 0, 1, 2, ...
  std::mt19937_64 rng(MixSeed(options.seed, (uint64_t{1} << 63) | static_cast<uint64_t>(index)));
  const auto lengths = static_cast<uint64_t>(options.sequence_length - options.min_length + 1);
  return options.min_length + static_cast<int64_t>(UniformBelow(rng, lengths));
}

absl::StatusOr<std::unique_ptr<PasskeyTask>> PasskeyTask::Create(const PasskeyOptions& options) {
  if (options.distractors < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("passkey task: distractors=%d must be >= 0", options.distractors));
  }
  if (options.sequence_length < MinPasskeySequenceLength(options.distractors)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "passkey task: sequence length %d is too short; a sample needs at least %d tokens for the "
        "key sentence, %d decoys, the question and the answer",
        options.sequence_length, MinPasskeySequenceLength(options.distractors),
        options.distractors));
  }
  if (options.min_length != 0 &&
      (options.min_length < MinPasskeySequenceLength(options.distractors) ||
       options.min_length > options.sequence_length)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "passkey task: min_length %d must be 0 (every sample fills its row) or in [%d, %d]: the "
        "shortest sample (with %d decoy sentences), and the sequence length",
        options.min_length, MinPasskeySequenceLength(options.distractors), options.sequence_length,
        options.distractors));
  }
  if (options.micro_batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "passkey task: micro-batch size %d must be positive", options.micro_batch_size));
  }
  return std::unique_ptr<PasskeyTask>(new PasskeyTask(options));
}

absl::StatusOr<Batch> PasskeyTask::BatchAt(const BatchCoordinates& where) {
  const int64_t t_len = options_.sequence_length;
  const int64_t first = FirstGlobalSample(where, options_.micro_batch_size);
  Batch batch = AllocateBatch(options_.micro_batch_size, t_len);
  for (int64_t b = 0; b < options_.micro_batch_size; ++b) {
    const int64_t length = PasskeySampleLength(options_, first + b);  // t <= T
    PasskeySample sample =
        MakePasskeySample(options_.seed, first + b, length, options_.depths, options_.distractors);
    sample.tokens.resize(t_len + 1, 0);  // [T + 1]: the sample's t + 1, then padding
    FillRow(batch, b, sample.tokens);
    int32_t* labels = batch.labels.data<int32_t>() + b * t_len;  // [T]
    std::fill(labels, labels + length - kPasskeyDigits, ops::kIgnoreIndex);
    std::fill(labels + length, labels + t_len, ops::kIgnoreIndex);
    batch.documents[b] = {{first + b, 0, length}};
    if (length < t_len) batch.documents[b].push_back({kPaddingDocument, length, t_len});
    batch.sources[b] = first + b;
  }
  return batch;
}

bool PasskeyRetrieved(std::span<const int32_t> labels, std::span<const int32_t> predictions) {
  KELVIN_CHECK_EQ(labels.size(), predictions.size());
  bool any_label = false;
  for (size_t t = 0; t < labels.size(); ++t) {
    if (labels[t] == ops::kIgnoreIndex) continue;
    any_label = true;
    if (predictions[t] != labels[t]) return false;
  }
  return any_label;
}

int64_t CountRetrieved(const Batch& batch, const Tensor& predictions) {
  KELVIN_CHECK(predictions.is_cpu() && predictions.shape() == batch.labels.shape())
      << predictions.ToString() << " vs labels " << batch.labels.ToString();
  const int64_t t_len = batch.sequence_length();
  int64_t retrieved = 0;
  for (int64_t b = 0; b < batch.rows(); ++b) {
    const std::span<const int32_t> labels(batch.labels.data<int32_t>() + b * t_len, t_len);
    const std::span<const int32_t> guesses(predictions.data<int32_t>() + b * t_len, t_len);
    retrieved += PasskeyRetrieved(labels, guesses) ? 1 : 0;
  }
  return retrieved;
}

}  // namespace kelvin::data
