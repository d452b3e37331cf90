// Deterministic randomness: seeds mixed as SplitMix64 says, draws in range and redrawn below the
// rejection bound (no modulo bias), permutations are permutations, and the values are pinned (a
// change would alter every shuffled epoch and break resuming runs started with an older build).
#include "data/sampling/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kelvin::data {
namespace {

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

// n = 2^63 + 12345: draws below 2^64 mod n = 2^63 - 12345 (about half) are redrawn, so a modulo
// without rejection would differ from the first draw at or above the bound on about every other
// call.
TEST(Random, UniformBelowRedrawsBelowTheRejectionBound) {
  const uint64_t n = (uint64_t{1} << 63) + 12345;
  const uint64_t bound = (uint64_t{1} << 63) - 12345;
  std::mt19937_64 rng(MixSeed(3, 4)), replay(MixSeed(3, 4));
  int redrawn = 0;
  for (int call = 0; call < 200; ++call) {
    uint64_t draw = replay();
    for (; draw < bound; draw = replay()) ++redrawn;
    ASSERT_EQ(UniformBelow(rng, n), draw % n) << "call " << call;
  }
  EXPECT_GT(redrawn, 50);  // the rejection was exercised
}

// SplitMix64(seed ^ SplitMix64(index)), computed independently in Python; SplitMix64(0) is the
// published 0xe220a8397b1dcdaf, so MixSeed(0, 0) = SplitMix64(0xe220a8397b1dcdaf).
TEST(Random, MixSeedValuesArePinned) {
  EXPECT_EQ(MixSeed(0, 0), 12035550249420947055ull);
  EXPECT_EQ(MixSeed(0, 1), 6791897765849424158ull);
  EXPECT_EQ(MixSeed(1, 0), 627405149472732430ull);
  EXPECT_EQ(MixSeed(7, 3), 16753576447339095367ull);
  EXPECT_EQ(MixSeed(20250214, 12), 16975993633574283623ull);
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
