// The haystack the synthetic long-context tasks hide their needles in: the passkey filler's
// sentences repeated, the sentence boundaries a needle may sit at, and the draws of a depth and a
// 5-digit number (data/sampling/random.h's, so every rank and library makes the same samples).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kelvin::data {

// The depths a needle may be hidden at, fractions of the filler in [0, 1].
struct DepthRange {
  double min = 0, max = 1;
};

// Offsets of the sentence boundaries of the longest run of whole filler sentences that fits in
// `budget` bytes: 0, then the end of each sentence; the last one is that run's length W.
std::vector<int64_t> FillerBoundaries(int64_t budget);

// A boundary drawn uniformly among those whose depth (boundary / W) lies in `depths`; when none
// does (short fillers have few), the one nearest the range. The whole range draws exactly as
// uniformly over all boundaries.
int64_t DrawBoundary(std::mt19937_64& rng, const std::vector<int64_t>& boundaries,
                     const DepthRange& depths);

// A 5-digit number (10000..99999).
int32_t DrawFiveDigits(std::mt19937_64& rng);

// Bytes [begin, end) of the endlessly repeated filler.
std::string FillerText(int64_t begin, int64_t end);

}  // namespace kelvin::data
