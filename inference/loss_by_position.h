// The loss of a scored stream by position in its window (the "perplexity versus context position"
// curve of long-context evaluations): ScoreResult's per-position sums grouped into buckets of
// consecutive positions, of one width or from given starts.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "inference/sequence_scorer.h"

namespace kelvin::inference {

// How positions are grouped (`kelvin eval --by-position`): `width` positions a bucket (the last
// one shorter when the window is not a multiple), or, when `starts` is not empty, buckets starting
// at those positions (the first 0, increasing), each ending where the next starts, the last at the
// window's end.
struct PositionBuckets {
  int64_t width = 0;
  std::vector<int64_t> starts;

  static PositionBuckets OfWidth(int64_t width) { return {width, {}}; }
  static PositionBuckets StartingAt(std::vector<int64_t> starts) { return {0, std::move(starts)}; }
};

// Positions [begin, end) of the window and the targets scored there.
struct PositionBucket {
  int64_t begin = 0, end = 0;
  int64_t targets = 0;
  double loss_sum = 0;
  double loss() const { return targets > 0 ? loss_sum / static_cast<double>(targets) : 0; }
};

// The buckets' starts [buckets] for windows of `window` tokens: 0, width, 2 width, ... or the
// given starts. Errors (naming --by-position and the value): width < 1 or > window; starts not
// beginning at 0, not increasing, or reaching the window.
absl::StatusOr<std::vector<int64_t>> PositionBucketStarts(const PositionBuckets& buckets,
                                                          int64_t window);

// `result`'s losses summed over each bucket; `starts` from PositionBucketStarts for the window
// the result was scored with (result.loss_sum_at.size()).
std::vector<PositionBucket> LossByPosition(const ScoreResult& result,
                                           std::span<const int64_t> starts);

}  // namespace kelvin::inference
