// Scoring a token stream: one window over everything equals the training forward's mean
// cross-entropy; non-overlapping and sliding windows score every target once, each with the
// context its window gives (checked against Forward on that window, f64); with a loss mask only its
// targets count, each with the same context; bad sizes are errors.
#include "inference/sequence_scorer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/inference/window_losses.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/tolerance.h"

namespace kelvin::inference {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Stream(int64_t n, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < n; ++t) tokens.push_back(static_cast<int32_t>((5 * t * t + 3) % vocab));
  return tokens;
}

// -log p(tokens[p + 1]) for the inputs [begin, end) by LlamaModel::Forward on them, summed over
// the positions [from, end) whose target is one (`is_target`[p + 1] = 1; empty: every target).
double ForwardLoss(models::LlamaModel& model, const std::vector<int32_t>& tokens, int64_t begin,
                   int64_t end, int64_t from, const std::vector<uint8_t>& is_target = {}) {
  const std::vector<double> losses = testing::ForwardTokenLosses(model, tokens, begin, end);
  double loss = 0;
  for (int64_t p = from; p < end; ++p) {
    if (is_target.empty() || is_target[p + 1] != 0) loss += losses[p - begin];
  }
  return loss;
}

TEST(SequenceScorer, WindowsScoreEveryTargetOnceWithTheirContext) {
  models::LlamaModel model(testing::TinySsaLlamaConfig(true, true), DType::kF64);
  model.InitRandom(21);
  const std::vector<int32_t> tokens = Stream(23, model.config().vocab_size);

  absl::StatusOr<ScoreResult> whole = ScoreTokens(model, tokens, 32, 32);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->targets, 22);
  EXPECT_EQ(whole->windows, 1);
  EXPECT_NEAR(whole->loss(), ForwardLoss(model, tokens, 0, 22, 0) / 22,
              testing::kF64PathLossAbsTol);

  // Non-overlapping windows of 8: inputs [0, 8), [8, 16), [16, 22).
  absl::StatusOr<ScoreResult> blocks = ScoreTokens(model, tokens, 8, 8);
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(blocks->targets, 22);
  EXPECT_EQ(blocks->windows, 3);
  const double block_loss = ForwardLoss(model, tokens, 0, 8, 0) +
                            ForwardLoss(model, tokens, 8, 16, 8) +
                            ForwardLoss(model, tokens, 16, 22, 16);
  EXPECT_NEAR(blocks->loss_sum, block_loss, testing::kF64PathLossSumAbsTol);

  // Windows of 8 at a stride of 5: [0, 8) scores 0..7, [5, 13) 8..12, [10, 18) 13..17, [15, 22)
  // 18..21.
  absl::StatusOr<ScoreResult> sliding = ScoreTokens(model, tokens, 8, 5);
  ASSERT_TRUE(sliding.ok());
  EXPECT_EQ(sliding->targets, 22);
  EXPECT_EQ(sliding->windows, 4);
  const double sliding_loss =
      ForwardLoss(model, tokens, 0, 8, 0) + ForwardLoss(model, tokens, 5, 13, 8) +
      ForwardLoss(model, tokens, 10, 18, 13) + ForwardLoss(model, tokens, 15, 22, 18);
  EXPECT_NEAR(sliding->loss_sum, sliding_loss, testing::kF64PathLossSumAbsTol);
}

// A fine-tuning stream: the mask marks the answers' tokens; only they count in the loss (the
// others still give context), in every window layout.
TEST(SequenceScorer, ALossMaskCountsOnlyItsTargets) {
  models::LlamaModel model(testing::TinySsaLlamaConfig(true, true), DType::kF64);
  model.InitRandom(5);
  const std::vector<int32_t> tokens = Stream(23, model.config().vocab_size);
  std::vector<uint8_t> is_target(tokens.size(), 0);
  int64_t targets = 0;
  for (const int64_t t : {0, 3, 4, 5, 9, 10, 17, 21, 22}) {  // token 0 can never count
    is_target[t] = 1;
    targets += t > 0 ? 1 : 0;
  }
  absl::StatusOr<ScoreResult> whole = ScoreTokens(model, tokens, 32, 32, is_target);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->targets, targets);
  EXPECT_EQ(whole->predicted, 22);
  EXPECT_NEAR(whole->loss_sum, ForwardLoss(model, tokens, 0, 22, 0, is_target),
              testing::kF64PathLossSumAbsTol);
  // The masked loss is not the unmasked one's (the test would pass on a mask ignored otherwise).
  EXPECT_GT(std::abs(whole->loss() - ForwardLoss(model, tokens, 0, 22, 0) / 22), 1e-6);

  absl::StatusOr<ScoreResult> sliding = ScoreTokens(model, tokens, 8, 5, is_target);
  ASSERT_TRUE(sliding.ok());
  EXPECT_EQ(sliding->targets, targets);
  const double sliding_loss = ForwardLoss(model, tokens, 0, 8, 0, is_target) +
                              ForwardLoss(model, tokens, 5, 13, 8, is_target) +
                              ForwardLoss(model, tokens, 10, 18, 13, is_target) +
                              ForwardLoss(model, tokens, 15, 22, 18, is_target);
  EXPECT_NEAR(sliding->loss_sum, sliding_loss, testing::kF64PathLossSumAbsTol);

  const std::vector<uint8_t> short_mask(5, 1);
  EXPECT_THAT(std::string(ScoreTokens(model, tokens, 8, 8, short_mask).status().message()),
              HasSubstr("the loss mask has 5 values for 23 tokens"));
}

TEST(SequenceScorer, BadSizesAndTokensAreErrors) {
  models::LlamaModel model(testing::TinySsaLlamaConfig(true, true), DType::kF64);
  model.InitRandom(1);
  const std::vector<int32_t> tokens = Stream(10, 12);
  EXPECT_THAT(std::string(ScoreTokens(model, {tokens.data(), 1}, 8, 8).status().message()),
              HasSubstr("the data has 1 tokens: scoring needs at least 2"));
  EXPECT_THAT(std::string(ScoreTokens(model, tokens, 33, 8).status().message()),
              HasSubstr("--seq-length 33: must be in [1, 32] (the model's positions)"));
  EXPECT_THAT(std::string(ScoreTokens(model, tokens, 8, 9).status().message()),
              HasSubstr("--stride 9: must be in [1, --seq-length 8]"));
  const std::vector<int32_t> outside = {1, 2, 40};
  EXPECT_THAT(std::string(ScoreTokens(model, outside, 8, 8).status().message()),
              HasSubstr("token 2 is 40, outside the model's vocabulary [0, 12)"));
}

}  // namespace
}  // namespace kelvin::inference
