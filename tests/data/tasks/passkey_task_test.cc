// The passkey-retrieval task: samples are deterministic in (seed, index), hold the key sentence at
// the stated depth and the question with the answer at the end, have labels only on the 5 answer
// digits, and vary across indices; with min_length each sample has a drawn length and its row is
// padded after the answer; retrieval scoring needs all 5 digits.
#include "data/tasks/passkey_task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/ops/cross_entropy.h"

namespace kelvin::data {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

constexpr int64_t kSequenceLength = 1024;

TEST(Passkey, MinimumLengthHoldsNoFiller) {
  EXPECT_EQ(MinPasskeySequenceLength(), 1 + 59 + 38 + 5 - 1);
  const PasskeySample sample = MakePasskeySample(1, 0, MinPasskeySequenceLength());
  EXPECT_EQ(ByteTokensToText(sample.tokens), "<s>" + PasskeySentence(sample.key) +
                                                 std::string(kPasskeyQuestion) +
                                                 std::to_string(sample.key));
  EXPECT_EQ(sample.depth, 0.0);
}

TEST(Passkey, SampleLayout) {
  std::string repeated_filler;
  while (repeated_filler.size() < kSequenceLength) repeated_filler.append(kPasskeyFiller);
  for (int64_t index = 0; index < 50; ++index) {
    const PasskeySample sample = MakePasskeySample(7, index, kSequenceLength);
    ASSERT_EQ(static_cast<int64_t>(sample.tokens.size()), kSequenceLength + 1);
    EXPECT_EQ(sample.tokens[0], kByteBos);
    EXPECT_GE(sample.key, 10000);
    EXPECT_LE(sample.key, 99999);
    const std::string text = ByteTokensToText(sample.tokens);
    const std::string key = std::to_string(sample.key);
    // The key sentence begins at key_position (3 text bytes stand for the 1 BOS token).
    EXPECT_EQ(text.substr(sample.key_position + 2, 59), PasskeySentence(sample.key)) << index;
    // Before the key: the filler from its start, cut after a whole sentence.
    const std::string filler_before = text.substr(3, sample.key_position - 1);
    EXPECT_EQ(filler_before, repeated_filler.substr(0, filler_before.size())) << index;
    if (!filler_before.empty()) {
      EXPECT_THAT(filler_before, EndsWith(". ")) << index;
    }
    // After the key: the filler goes on where it stopped, then spaces pad up to the question.
    const size_t after_key = sample.key_position + 2 + PasskeySentence(sample.key).size();
    const size_t question = text.size() - 5 - kPasskeyQuestion.size();
    const std::string filler_after = text.substr(after_key, question - after_key);
    const size_t padding = filler_after.size() - (filler_after.find_last_not_of(' ') + 1);
    EXPECT_LT(padding, 25u) << index;  // less than one more sentence (+ its trailing space)
    EXPECT_EQ(filler_after.substr(0, filler_after.size() - padding),
              repeated_filler.substr(filler_before.size(), filler_after.size() - padding))
        << index;
    // The end: the question, then the answer.
    EXPECT_EQ(text.substr(text.size() - 5 - kPasskeyQuestion.size()),
              std::string(kPasskeyQuestion) + key);
    EXPECT_EQ(text.find(PasskeySentence(sample.key)), sample.key_position + 2);
  }
}

TEST(Passkey, KeySitsAtTheStatedDepth) {
  // filler bytes available: T - MinPasskeySequenceLength(); the whole sentences used are at most
  // one sentence (<= 23 bytes) fewer.
  const double filler = static_cast<double>(kSequenceLength - MinPasskeySequenceLength());
  for (int64_t index = 0; index < 50; ++index) {
    const PasskeySample sample = MakePasskeySample(3, index, kSequenceLength);
    const double filler_before = static_cast<double>(sample.key_position - 1);
    EXPECT_GE(sample.depth, 0.0);
    EXPECT_LE(sample.depth, 1.0);
    EXPECT_NEAR(filler_before / filler, sample.depth, 23.0 / filler) << index;
  }
}

TEST(Passkey, DeterministicInSeedAndIndex) {
  const PasskeySample a = MakePasskeySample(11, 123, kSequenceLength);
  const PasskeySample b = MakePasskeySample(11, 123, kSequenceLength);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.key_position, b.key_position);
  EXPECT_NE(MakePasskeySample(12, 123, kSequenceLength).tokens, a.tokens);
}

TEST(Passkey, IndicesVaryKeysAndDepths) {
  std::set<int32_t> keys;
  std::set<int64_t> positions;
  for (int64_t index = 0; index < 200; ++index) {
    const PasskeySample sample = MakePasskeySample(5, index, kSequenceLength);
    keys.insert(sample.key);
    positions.insert(sample.key_position);
  }
  EXPECT_GE(keys.size(), 195u);
  // 1024 tokens hold ~46 filler sentences: nearly every boundary gets drawn.
  EXPECT_GE(positions.size(), 35u);
  EXPECT_TRUE(positions.count(1));  // the very start is a possible depth
}

TEST(Passkey, DepthRangeKeepsTheKeyInsideIt) {
  // The whole range draws as before: the default samples.
  for (int64_t index = 0; index < 20; ++index) {
    EXPECT_EQ(MakePasskeySample(5, index, kSequenceLength, {0.0, 1.0}).tokens,
              MakePasskeySample(5, index, kSequenceLength).tokens);
  }
  // The first tenth of the filler (a needle-in-a-haystack sweep's hardest bucket), and the last.
  std::set<int64_t> positions;
  for (int64_t index = 0; index < 200; ++index) {
    const PasskeySample shallow = MakePasskeySample(5, index, kSequenceLength, {0.0, 0.1});
    EXPECT_LE(shallow.depth, 0.1) << index;
    positions.insert(shallow.key_position);
    const PasskeySample deep = MakePasskeySample(5, index, kSequenceLength, {0.9, 1.0});
    EXPECT_GE(deep.depth, 0.9) << index;
  }
  EXPECT_GE(positions.size(), 3u);  // still drawn among the range's boundaries
  // A range between two boundaries: the nearest one.
  const PasskeySample narrow = MakePasskeySample(5, 0, kSequenceLength, {0.5001, 0.5002});
  EXPECT_NEAR(narrow.depth, 0.5, 0.03);
}

TEST(Passkey, BatchLabelsOnlyTheAnswerDigits) {
  absl::StatusOr<std::unique_ptr<PasskeyTask>> task =
      PasskeyTask::Create({.sequence_length = 256, .micro_batch_size = 3, .seed = 9, .depths = {}});
  ASSERT_TRUE(task.ok()) << task.status();
  const BatchCoordinates where = {
      .step = 4, .micro_batch = 1, .micro_batches = 2, .dp_rank = 1, .dp_size = 2};
  absl::StatusOr<Batch> batch = (*task)->BatchAt(where);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->tokens.shape(), (Shape{3, 256}));
  const int64_t first = ((4 * 2 + 1) * 2 + 1) * 3;
  for (int64_t b = 0; b < 3; ++b) {
    const PasskeySample sample = MakePasskeySample(9, first + b, 256);
    EXPECT_EQ(batch->sources[b], first + b);
    EXPECT_EQ(batch->documents[b], (std::vector<DocumentSpan>{{first + b, 0, 256}}));
    const int32_t* tokens = batch->tokens.data<int32_t>() + b * 256;
    const int32_t* labels = batch->labels.data<int32_t>() + b * 256;
    const int32_t* positions = batch->positions.data<int32_t>() + b * 256;
    std::string answer;
    for (int64_t t = 0; t < 256; ++t) {
      EXPECT_EQ(tokens[t], sample.tokens[t]);
      EXPECT_EQ(positions[t], t);
      if (t < 256 - kPasskeyDigits) {
        EXPECT_EQ(labels[t], ops::kIgnoreIndex) << t;
      } else {
        EXPECT_EQ(labels[t], sample.tokens[t + 1]);
        answer.push_back(static_cast<char>(labels[t]));
      }
    }
    EXPECT_EQ(answer, std::to_string(sample.key));  // decoding the labels gives the key
    EXPECT_EQ(std::vector<int32_t>(labels + 256 - kPasskeyDigits, labels + 256),
              TextToByteTokens(std::to_string(sample.key)));
  }
}

TEST(Passkey, RetrievalNeedsAllFiveDigits) {
  absl::StatusOr<std::unique_ptr<PasskeyTask>> task =
      PasskeyTask::Create({.sequence_length = 128, .micro_batch_size = 4, .seed = 2, .depths = {}});
  ASSERT_TRUE(task.ok()) << task.status();
  absl::StatusOr<Batch> batch = (*task)->BatchAt({});
  ASSERT_TRUE(batch.ok()) << batch.status();
  // Perfect predictions at the labels, garbage elsewhere (unlabelled positions do not count).
  Tensor predictions = Tensor::Empty({4, 128}, DType::kI32);
  int32_t* guesses = predictions.data<int32_t>();
  const int32_t* labels = batch->labels.data<int32_t>();
  for (int64_t i = 0; i < 4 * 128; ++i) guesses[i] = labels[i] == ops::kIgnoreIndex ? 0 : labels[i];
  EXPECT_EQ(CountRetrieved(*batch, predictions), 4);
  guesses[1 * 128 + 127] = '0' + (labels[1 * 128 + 127] - '0' + 1) % 10;  // last digit of row 1
  guesses[2 * 128 + 123] = 'x';                                           // first digit of row 2
  EXPECT_EQ(CountRetrieved(*batch, predictions), 2);
  EXPECT_FALSE(PasskeyRetrieved(std::vector<int32_t>(3, ops::kIgnoreIndex),
                                std::vector<int32_t>(3, 0)));  // nothing to retrieve
}

TEST(Passkey, DistractorsAreDecoysTheQuestionDoesNotAskFor) {
  constexpr int64_t kDecoys = 4;
  EXPECT_EQ(MinPasskeySequenceLength(kDecoys),
            MinPasskeySequenceLength() +
                kDecoys * static_cast<int64_t>(DistractorSentence(10000).size()));
  std::string repeated_filler;
  while (repeated_filler.size() < 4 * kSequenceLength) repeated_filler.append(kPasskeyFiller);
  for (int64_t index = 0; index < 50; ++index) {
    const PasskeySample plain = MakePasskeySample(3, index, kSequenceLength);
    const PasskeySample sample = MakePasskeySample(3, index, kSequenceLength, {}, kDecoys);
    ASSERT_EQ(static_cast<int64_t>(sample.tokens.size()), kSequenceLength + 1);
    EXPECT_EQ(sample.key, plain.key) << index;  // decoys are drawn after the key
    std::string text = ByteTokensToText(sample.tokens);
    EXPECT_EQ(text.substr(sample.key_position + 2, 59), PasskeySentence(sample.key)) << index;
    EXPECT_THAT(text, EndsWith(std::string(kPasskeyQuestion) + std::to_string(sample.key)));
    // Exactly kDecoys decoy sentences, each with a number other than the key; taking them and
    // the key sentence out leaves the plain filler, padding and question.
    int64_t decoys = 0;
    for (size_t at = text.find("The door code is "); at != std::string::npos;
         at = text.find("The door code is ")) {
      const int32_t code = std::stoi(text.substr(at + 17, 5));
      EXPECT_NE(code, sample.key) << index;
      EXPECT_EQ(text.substr(at, DistractorSentence(code).size()), DistractorSentence(code));
      text.erase(at, DistractorSentence(code).size());
      ++decoys;
    }
    EXPECT_EQ(decoys, kDecoys) << index;
    text.erase(text.find(PasskeySentence(sample.key)), PasskeySentence(sample.key).size());
    const size_t filler_end = text.rfind(". ") + 2;  // the question has no ". "
    const std::string filler = text.substr(3, filler_end - 3);
    EXPECT_EQ(filler, repeated_filler.substr(0, filler.size())) << index;
  }
  const absl::Status short_status =
      PasskeyTask::Create({.sequence_length = MinPasskeySequenceLength(2) - 1,
                           .micro_batch_size = 1,
                           .seed = 0,
                           .depths = {},
                           .distractors = 2})
          .status();
  EXPECT_THAT(short_status.message(), HasSubstr("2 decoys"));
}

TEST(Passkey, MinLengthDrawsEachSampleLengthAndPadsTheRow) {
  const PasskeyOptions options{.sequence_length = 256,
                               .micro_batch_size = 8,
                               .seed = 3,
                               .depths = {},
                               .distractors = 0,
                               .min_length = 120};
  absl::StatusOr<std::unique_ptr<PasskeyTask>> task = PasskeyTask::Create(options);
  ASSERT_TRUE(task.ok()) << task.status();
  std::set<int64_t> lengths;
  for (int64_t step = 0; step < 4; ++step) {
    absl::StatusOr<Batch> batch = (*task)->BatchAt({.step = step});
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (int64_t b = 0; b < 8; ++b) {
      const int64_t index = batch->sources[b];
      const int64_t length = PasskeySampleLength(options, index);
      ASSERT_GE(length, 120);
      ASSERT_LE(length, 256);
      lengths.insert(length);
      // The row is sample `index` made at its own length, then token 0 with no loss.
      const PasskeySample sample = MakePasskeySample(3, index, length);
      const int32_t* tokens = batch->tokens.data<int32_t>() + b * 256;  // [T]
      const int32_t* labels = batch->labels.data<int32_t>() + b * 256;  // [T]
      for (int64_t t = 0; t < 256; ++t) {
        EXPECT_EQ(tokens[t], t <= length ? sample.tokens[t] : 0) << t;
        const bool answer = t >= length - kPasskeyDigits && t < length;
        EXPECT_EQ(labels[t], answer ? sample.tokens[t + 1] : ops::kIgnoreIndex) << t;
      }
      std::vector<DocumentSpan> spans = {{index, 0, length}};
      if (length < 256) spans.push_back({kPaddingDocument, length, 256});
      EXPECT_EQ(batch->documents[b], spans);
    }
  }
  EXPECT_GT(lengths.size(), 20u);  // 32 draws over 137 lengths
  // Without min_length every sample fills its row, as before the option existed.
  const PasskeyOptions fixed{.sequence_length = 256,
                             .micro_batch_size = 8,
                             .seed = 3,
                             .depths = {},
                             .distractors = 0,
                             .min_length = 0};
  EXPECT_EQ(PasskeySampleLength(fixed, 5), 256);
  EXPECT_THAT(PasskeyTask::Create({.sequence_length = 256,
                                   .micro_batch_size = 1,
                                   .seed = 0,
                                   .depths = {},
                                   .distractors = 0,
                                   .min_length = 300})
                  .status()
                  .message(),
              HasSubstr("min_length 300 must be 0 (every sample fills its row) or in [102, 256]"));
}

TEST(Passkey, TooShortSequenceIsAnError) {
  const absl::Status status =
      PasskeyTask::Create({.sequence_length = 64, .micro_batch_size = 1, .seed = 0, .depths = {}})
          .status();
  EXPECT_THAT(status.message(), HasSubstr("sequence length 64 is too short"));
  EXPECT_THAT(status.message(), HasSubstr("at least 102 tokens"));
  EXPECT_THAT(
      PasskeyTask::Create({.sequence_length = 128, .micro_batch_size = 0, .seed = 0, .depths = {}})
          .status()
          .message(),
      HasSubstr("passkey task: micro-batch size 0"));
}

}  // namespace
}  // namespace kelvin::data
