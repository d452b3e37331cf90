// Deterministic randomness for data pipelines (see random.h).
#include "data/sampling/random.h"

#include <utility>

#include "core/check.h"

namespace kelvin::data {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t MixSeed(uint64_t seed, uint64_t index) { return SplitMix64(seed ^ SplitMix64(index)); }

uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  KELVIN_CHECK_GT(n, 0u);
  // Draws below 2^64 mod n would make the low residues more likely: redraw them.
  const uint64_t reject_below = (0 - n) % n;
  uint64_t draw = rng();
  while (draw < reject_below) draw = rng();
  return draw % n;
}

std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed) {
  KELVIN_CHECK_GE(n, 0);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace kelvin::data
