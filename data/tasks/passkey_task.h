// The passkey-retrieval task: filler text hiding a 5-digit key at a random depth, then the
// question; the loss is on the 5 answer digits only. Byte vocabulary: token = byte value, plus BOS.
// Sample i of seed s is drawn from mt19937_64(MixSeed(s, i)), so any rank makes any sample.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "data/sampling/batch.h"
#include "data/tasks/haystack.h"

namespace kelvin::data {

inline constexpr int32_t kByteBos = 256;
// Bytes and BOS need 257 ids; padded to 260 so that the vocabulary splits across 2 or 4 TP ranks.
inline constexpr int64_t kByteVocabSize = 260;
inline constexpr int64_t kPasskeyDigits = 5;

inline constexpr std::string_view kPasskeyFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
inline constexpr std::string_view kPasskeyQuestion = "What is the pass key? The pass key is ";
// "The pass key is 48213. Remember it. 48213 is the pass key. "
std::string PasskeySentence(int32_t key);
// "The door code is 70512. Remember it. 70512 is the door code. ": a decoy, never asked for.
std::string DistractorSentence(int32_t code);

// The shortest T whose samples fit BOS, the key sentence, `distractors` decoys, the question and
// the answer (no filler).
int64_t MinPasskeySequenceLength(int64_t distractors = 0);

struct PasskeySample {
  std::vector<int32_t> tokens;  // [T + 1]
  int32_t key = 0;              // 10000..99999
  int64_t key_position = 0;     // index in tokens of the key sentence's first byte
  double depth = 0;             // filler before the key / all filler sentences, in [0, 1]
};

// Sample `index` of `seed`; T >= MinPasskeySequenceLength(distractors). Without distractors the
// samples are those of every earlier version. Layout of the T + 1 tokens: BOS, filler[0:p], key
// sentence, filler[p:W], spaces, question, 5 digits, where the filler is whole sentences (W bytes)
// and p a sentence boundary drawn uniformly among those at depths p / W in [min, max] (the one
// nearest the range when none is). With distractors, that many decoy sentences (another name,
// another 5-digit number) sit at uniformly drawn filler boundaries too: the answer is the one the
// question names.
PasskeySample MakePasskeySample(uint64_t seed, int64_t index, int64_t sequence_length,
                                const DepthRange& depths = {}, int64_t distractors = 0);

// Byte tokens <-> text (BOS prints as "<s>"; the test and debugging view of a sample).
std::vector<int32_t> TextToByteTokens(std::string_view text);
std::string ByteTokensToText(std::span<const int32_t> tokens);

struct PasskeyOptions {
  int64_t sequence_length = 0;   // T
  int64_t micro_batch_size = 0;  // B
  uint64_t seed = 0;
  DepthRange depths;
  int64_t distractors = 0;  // decoy sentences per sample
  // 0: every sample is T tokens. Otherwise each sample's length is drawn uniformly in
  // [min_length, T] and its row padded after the answer.
  int64_t min_length = 0;
};

// The length of sample `index` of `seed` under `options` (T when min_length is 0), from a stream
// of its own so that the samples of a fixed length are those of every earlier version.
int64_t PasskeySampleLength(const PasskeyOptions& options, int64_t index);

// Micro-batches of passkey samples: global sample g is sample g of the seed.
class PasskeyTask : public BatchSource {
 public:
  static absl::StatusOr<std::unique_ptr<PasskeyTask>> Create(const PasskeyOptions& options);

  int64_t micro_batch_size() const override { return options_.micro_batch_size; }
  int64_t sequence_length() const override { return options_.sequence_length; }
  // Labels are ops::kIgnoreIndex except at the answer digits: the last 5 positions of a sample of
  // length t (t = T without min_length), whose row's positions t..T-1 hold token 0 (padding).
  absl::StatusOr<Batch> BatchAt(const BatchCoordinates& where) override;

 private:
  explicit PasskeyTask(const PasskeyOptions& options) : options_(options) {}
  PasskeyOptions options_;
};

// Scoring. A row is retrieved when the predictions (argmax of the logits) equal the labels at every
// labelled position: all 5 answer digits right. labels, predictions [T].
bool PasskeyRetrieved(std::span<const int32_t> labels, std::span<const int32_t> predictions);
// The retrieved rows of a batch; predictions [B, T] i32 on the host.
int64_t CountRetrieved(const Batch& batch, const Tensor& predictions);

}  // namespace kelvin::data
