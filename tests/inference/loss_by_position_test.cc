// The loss by position in the window: each bucket's loss and target count equal the f64 training
// forward's per-target losses summed by hand over the bucket's positions (windows listed here), for
// non-overlapping windows whose length the width does not divide, a loss mask (only its targets
// count) and sliding windows with given bucket starts; bad widths and starts are errors naming
// --by-position and the value.
#include "inference/loss_by_position.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/inference/window_losses.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/tolerance.h"

namespace kelvin::inference {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int32_t> Stream(int64_t n, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < n; ++t) tokens.push_back(static_cast<int32_t>((7 * t * t + 2) % vocab));
  return tokens;
}

// One window as the scorer lays it out: inputs [begin, end), those from `from` on scored.
struct Window {
  int64_t begin, end, from;
};

// The reference: per bucket [starts[b], next start or window), the summed Forward losses and the
// count of the targets (is_target[p + 1] = 1, or all) whose input sits at those window positions.
std::vector<PositionBucket> HandBuckets(models::LlamaModel& model,
                                        const std::vector<int32_t>& tokens,
                                        const std::vector<Window>& windows,
                                        const std::vector<int64_t>& starts, int64_t window,
                                        const std::vector<uint8_t>& is_target = {}) {
  std::vector<PositionBucket> buckets;
  for (size_t b = 0; b < starts.size(); ++b) {
    buckets.emplace_back();
    buckets.back().begin = starts[b];
    buckets.back().end = b + 1 < starts.size() ? starts[b + 1] : window;
  }
  for (const Window& w : windows) {
    const std::vector<double> losses = testing::ForwardTokenLosses(model, tokens, w.begin, w.end);
    for (int64_t p = w.from; p < w.end; ++p) {
      if (!is_target.empty() && is_target[p + 1] == 0) continue;
      for (PositionBucket& bucket : buckets) {
        if (p - w.begin >= bucket.begin && p - w.begin < bucket.end) {
          bucket.loss_sum += losses[p - w.begin];
          ++bucket.targets;
        }
      }
    }
  }
  return buckets;
}

std::vector<int64_t> Targets(const std::vector<PositionBucket>& buckets) {
  std::vector<int64_t> targets;
  for (const PositionBucket& bucket : buckets) targets.push_back(bucket.targets);
  return targets;
}

void ExpectBucketsEqual(const std::vector<PositionBucket>& actual,
                        const std::vector<PositionBucket>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t b = 0; b < actual.size(); ++b) {
    EXPECT_EQ(actual[b].begin, expected[b].begin) << "bucket " << b;
    EXPECT_EQ(actual[b].end, expected[b].end) << "bucket " << b;
    EXPECT_EQ(actual[b].targets, expected[b].targets) << "bucket " << b;
    EXPECT_NEAR(actual[b].loss_sum, expected[b].loss_sum, testing::kF64PathLossSumAbsTol)
        << "bucket " << b;
  }
}

class LossByPositionTest : public ::testing::Test {
 protected:
  LossByPositionTest() : model_(testing::TinySsaLlamaConfig(true, true), DType::kF64) {
    model_.InitRandom(13);
  }

  // The scorer's result bucketed; the starts must be valid for the window.
  std::vector<PositionBucket> Score(const std::vector<int32_t>& tokens, int64_t window,
                                    int64_t stride, const PositionBuckets& spec,
                                    const std::vector<uint8_t>& is_target = {}) {
    absl::StatusOr<ScoreResult> result = ScoreTokens(model_, tokens, window, stride, is_target);
    EXPECT_TRUE(result.ok()) << result.status();
    absl::StatusOr<std::vector<int64_t>> starts = PositionBucketStarts(spec, window);
    EXPECT_TRUE(starts.ok()) << starts.status();
    return LossByPosition(*result, *starts);
  }

  models::LlamaModel model_;
};

// 27 tokens in windows of 10 (inputs [0, 10), [10, 20), [20, 26)), buckets of 4: [0, 4), [4, 8)
// and the shorter [8, 10).
TEST_F(LossByPositionTest, BucketsOfAWidthThatDoesNotDivideTheWindow) {
  const std::vector<int32_t> tokens = Stream(27, model_.config().vocab_size);
  const std::vector<PositionBucket> buckets = Score(tokens, 10, 10, PositionBuckets::OfWidth(4));
  const std::vector<PositionBucket> expected =
      HandBuckets(model_, tokens, {{0, 10, 0}, {10, 20, 10}, {20, 26, 20}}, {0, 4, 8}, 10);
  EXPECT_THAT(Targets(expected), ElementsAre(12, 10, 4));  // 4 + 4 + 4, 4 + 4 + 2, 2 + 2 + 0
  ExpectBucketsEqual(buckets, expected);
  // The buckets differ (a check that the sums are not one number spread evenly).
  EXPECT_GT(std::abs(buckets[0].loss() - buckets[2].loss()), 1e-6);
}

// A loss mask: only its targets count, each in the bucket of its input's window position. Targets
// 1, 2, 3, 7 (window 0: positions 0, 1, 2, 6), 11, 12, 13, 14, 19 (window 1: 0, 1, 2, 3, 8), 22
// and 26 (window 2: 1, 5); token 0 is never a target.
TEST_F(LossByPositionTest, ALossMaskCountsOnlyItsTargets) {
  const std::vector<int32_t> tokens = Stream(27, model_.config().vocab_size);
  std::vector<uint8_t> is_target(tokens.size(), 0);
  for (const int t : {0, 1, 2, 3, 7, 11, 12, 13, 14, 19, 22, 26}) is_target[t] = 1;
  const std::vector<PositionBucket> buckets =
      Score(tokens, 10, 10, PositionBuckets::OfWidth(4), is_target);
  const std::vector<PositionBucket> expected = HandBuckets(
      model_, tokens, {{0, 10, 0}, {10, 20, 10}, {20, 26, 20}}, {0, 4, 8}, 10, is_target);
  EXPECT_THAT(Targets(expected), ElementsAre(8, 2, 1));
  ExpectBucketsEqual(buckets, expected);
}

// Windows of 8 sliding at 5 over 23 tokens: the first window scores positions 0..7, the later ones
// only 3..7 (their first 3 inputs were scored before); buckets starting at 0, 3 and 6.
TEST_F(LossByPositionTest, SlidingWindowsWithGivenStarts) {
  const std::vector<int32_t> tokens = Stream(23, model_.config().vocab_size);
  const std::vector<PositionBucket> buckets =
      Score(tokens, 8, 5, PositionBuckets::StartingAt({0, 3, 6}));
  const std::vector<PositionBucket> expected = HandBuckets(
      model_, tokens, {{0, 8, 0}, {5, 13, 8}, {10, 18, 13}, {15, 22, 18}}, {0, 3, 6}, 8);
  EXPECT_THAT(Targets(expected), ElementsAre(3, 12, 7));
  ExpectBucketsEqual(buckets, expected);
}

TEST(PositionBucketStarts, WidthsAndStartsWithinTheWindow) {
  EXPECT_THAT(*PositionBucketStarts(PositionBuckets::OfWidth(3), 10), ElementsAre(0, 3, 6, 9));
  EXPECT_THAT(*PositionBucketStarts(PositionBuckets::OfWidth(10), 10), ElementsAre(0));
  EXPECT_THAT(*PositionBucketStarts(PositionBuckets::StartingAt({0, 1, 9}), 10),
              ElementsAre(0, 1, 9));
  const auto problem = [](const PositionBuckets& buckets) {
    return std::string(PositionBucketStarts(buckets, 10).status().message());
  };
  EXPECT_THAT(problem(PositionBuckets::OfWidth(0)),
              HasSubstr("--by-position 0: a bucket's width must be in [1, 10] (the scoring "
                        "window, --seq-length)"));
  EXPECT_THAT(problem(PositionBuckets::OfWidth(-4)),
              HasSubstr("--by-position -4: a bucket's width must be in"));
  EXPECT_THAT(problem(PositionBuckets::OfWidth(11)),
              HasSubstr("--by-position 11: a bucket's width must be in"));
  EXPECT_THAT(
      problem(PositionBuckets::StartingAt({1, 5})),
      HasSubstr("--by-position: the first bucket starts at 1; it must start at position 0"));
  EXPECT_THAT(problem(PositionBuckets::StartingAt({0, 5, 5})),
              HasSubstr("the bucket start 5 must be greater than the one before it (5)"));
  EXPECT_THAT(problem(PositionBuckets::StartingAt({0, 4, 10})),
              HasSubstr("the bucket start 10 must be greater than the one before it (4) and less "
                        "than the scoring window (--seq-length 10)"));
}

}  // namespace
}  // namespace kelvin::inference
