// Deterministic randomness: the engine is the standard's mt19937_64, draws are unbiased and in
// range, permutations are permutations, and their values are pinned (a change would alter every
// shuffled epoch and break resuming runs started with an older build).
#include "data/sampling/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kelvin::data {
namespace {

TEST(Random, EngineIsTheStandardMt19937_64) {
  std::mt19937_64 rng;  // default seed 5489; the standard fixes its 10000th output
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
}

TEST(Random, UniformBelowStaysInRangeWithoutBias) {
  std::mt19937_64 rng(MixSeed(1, 2));
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) {
    const uint64_t draw = UniformBelow(rng, 6);
    ASSERT_LT(draw, 6u);
    ++counts[draw];
  }
  for (const int count : counts) EXPECT_NEAR(count, 10000, 400);
  EXPECT_EQ(UniformBelow(rng, 1), 0u);
  const uint64_t huge = (uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 100; ++i) EXPECT_LT(UniformBelow(rng, huge), huge);
}

TEST(Random, MixSeedSeparatesStreams) {
  EXPECT_NE(MixSeed(0, 0), MixSeed(0, 1));
  EXPECT_NE(MixSeed(0, 1), MixSeed(1, 0));
  EXPECT_EQ(MixSeed(7, 3), MixSeed(7, 3));
}

TEST(Random, SeededPermutationIsAPermutation) {
  std::vector<int64_t> order = SeededPermutation(1000, 17);
  EXPECT_NE(order, SeededPermutation(1000, 18));
  EXPECT_EQ(order, SeededPermutation(1000, 17));
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(SeededPermutation(0, 1).empty());
  EXPECT_EQ(SeededPermutation(1, 1), std::vector<int64_t>{0});
}

// Cross-checked with an independent Python mt19937_64 and the same rejection and Fisher-Yates.
TEST(Random, SeededPermutationValuesArePinned) {
  EXPECT_EQ(SeededPermutation(10, 42), (std::vector<int64_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
}

}  // namespace
}  // namespace kelvin::data
