// Deterministic randomness for data pipelines: seeds mixed from (seed, index) and draws built only
// on std::mt19937_64's standard-specified output, so every standard library and every rank gives
// the same samples and permutations (std::shuffle and std::uniform_int_distribution do not).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kelvin::data {

// A well-spread 64-bit seed for the stream `index` of `seed` (SplitMix64 finalizer over both).
uint64_t MixSeed(uint64_t seed, uint64_t index);

// A uniform integer in [0, n), n > 0, by rejection (no modulo bias).
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n);

// 0..n-1 in a Fisher-Yates order drawn from mt19937_64(seed).
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed);

}  // namespace kelvin::data
