// Bucket starts checked against the window, then the per-position sums added up per bucket.
#include "inference/loss_by_position.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace kelvin::inference {

absl::StatusOr<std::vector<int64_t>> PositionBucketStarts(const PositionBuckets& buckets,
                                                          int64_t window) {
  KELVIN_CHECK_GT(window, 0);
  std::vector<int64_t> starts;
  if (buckets.starts.empty()) {
    if (buckets.width < 1 || buckets.width > window) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--by-position ", buckets.width, ": a bucket's width must be in [1, ", window,
          "] (the scoring window, --seq-length); give a smaller width or a longer window"));
    }
    for (int64_t start = 0; start < window; start += buckets.width) starts.push_back(start);
    return starts;
  }
  if (buckets.starts.front() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--by-position: the first bucket starts at ",
                                                   buckets.starts.front(),
                                                   "; it must start at position 0"));
  }
  for (size_t i = 1; i < buckets.starts.size(); ++i) {
    if (buckets.starts[i] <= buckets.starts[i - 1] || buckets.starts[i] >= window) {
      return absl::InvalidArgumentError(
          absl::StrCat("--by-position: the bucket start ", buckets.starts[i],
                       " must be greater than the one before it (", buckets.starts[i - 1],
                       ") and less than the scoring window (--seq-length ", window, ")"));
    }
  }
  return buckets.starts;
}

std::vector<PositionBucket> LossByPosition(const ScoreResult& result,
                                           std::span<const int64_t> starts) {
  const int64_t window = static_cast<int64_t>(result.loss_sum_at.size());
  KELVIN_CHECK(!starts.empty() && starts.front() == 0 && starts.back() < window)
      << "LossByPosition: bucket starts for another window than " << window;
  std::vector<PositionBucket> buckets;
  for (size_t b = 0; b < starts.size(); ++b) {
    PositionBucket bucket;
    bucket.begin = starts[b];
    bucket.end = b + 1 < starts.size() ? starts[b + 1] : window;
    for (int64_t p = bucket.begin; p < bucket.end; ++p) {
      bucket.loss_sum += result.loss_sum_at[static_cast<size_t>(p)];
      bucket.targets += result.targets_at[static_cast<size_t>(p)];
    }
    buckets.push_back(bucket);
  }
  return buckets;
}

}  // namespace kelvin::inference
