// Bucket planning over the backward's finishing order, and the buckets' start-in-order, wait-all
// reduction over the replicas (all-reduce in place, or ZeRO-1's uneven reduce-scatter of each
// stretch to the ranks whose shards it covers).
#include "parallel/gradient_buckets.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/check.h"

namespace kelvin::parallel {

std::vector<GradientBucket> PlanGradientBuckets(const ParameterSet& params,
                                                const std::vector<std::vector<std::string>>& units,
                                                int64_t bucket_elements) {
  KELVIN_CHECK(bucket_elements >= 1) << "gradient buckets of " << bucket_elements << " elements";
  std::map<std::string, int> unit_of;
  for (size_t u = 0; u < units.size(); ++u) {
    for (const std::string& name : units[u]) {
      KELVIN_CHECK(params.Contains(name))
          << "gradient unit " << u << " names " << name << ", which is not a parameter";
      KELVIN_CHECK(unit_of.emplace(name, static_cast<int>(u)).second)
          << name << " is in two gradient units";
    }
  }
  for (const ParameterSet::Entry& e : params.entries()) {
    KELVIN_CHECK(unit_of.count(e.name)) << e.name << " is in no gradient unit";
  }
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  auto close = [&] {
    // Each group's stretches in buffer order, adjacent ones merged.
    std::sort(open.stretches.begin(), open.stretches.end(),
              [](const GradientStretch& a, const GradientStretch& b) {
                return std::pair(a.group, a.begin) < std::pair(b.group, b.begin);
              });
    std::vector<GradientStretch> merged;
    for (const GradientStretch& s : open.stretches) {
      if (!merged.empty() && merged.back().group == s.group && merged.back().end == s.begin) {
        merged.back().end = s.end;
      } else {
        merged.push_back(s);
      }
    }
    open.stretches = std::move(merged);
    buckets.push_back(std::move(open));
    open = GradientBucket();
  };
  for (size_t u = 0; u < units.size(); ++u) {
    open.units.push_back(static_cast<int>(u));
    for (const std::string& name : units[u]) {
      const ParameterSet::Entry& e = params.Get(name);
      if (!e.trainable) continue;  // frozen: no gradient to reduce, no master to gather
      open.stretches.push_back({e.group, e.offset, e.offset + e.value.numel()});
      open.elements += e.value.numel();
    }
    if (open.elements >= bucket_elements || u + 1 == units.size()) close();
  }
  return buckets;
}

std::vector<int> BucketOfUnit(const std::vector<GradientBucket>& buckets) {
  std::vector<int> bucket_of;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const int unit : buckets[b].units) {
      if (unit >= static_cast<int>(bucket_of.size())) bucket_of.resize(unit + 1, -1);
      bucket_of[unit] = static_cast<int>(b);
    }
  }
  return bucket_of;
}

StretchOverShards SplitOverShards(const GradientStretch& stretch, int64_t shard_elements, int rank,
                                  int ranks) {
  StretchOverShards split;
  for (int r = 0; r < ranks; ++r) {
    split.counts.push_back(std::max<int64_t>(0, std::min(stretch.end, (r + 1) * shard_elements) -
                                                    std::max(stretch.begin, r * shard_elements)));
  }
  split.shard_begin = std::clamp(stretch.begin - rank * shard_elements, int64_t{0}, shard_elements);
  return split;
}

GradientBuckets::GradientBuckets(ParameterSet& params, Communicator& replicas,
                                 std::vector<GradientBucket> buckets, bool overlap,
                                 DistributedAdamW* zero)
    : params_(params),
      replicas_(replicas),
      buckets_(std::move(buckets)),
      overlap_(overlap),
      zero_(zero),
      bucket_of_unit_(BucketOfUnit(buckets_)) {
  for (const GradientBucket& bucket : buckets_) {
    unfinished_.push_back(static_cast<int>(bucket.units.size()));
  }
}

GradientBuckets::~GradientBuckets() {
  for (const auto& pending : in_flight_) pending->Wait();  // nothing is left half-sent
}

void GradientBuckets::Finished(int unit) {
  KELVIN_CHECK(unit >= 0 && unit < static_cast<int>(bucket_of_unit_.size()))
      << "gradient unit " << unit << " of " << bucket_of_unit_.size();
  int& unfinished = unfinished_[static_cast<size_t>(bucket_of_unit_[unit])];
  KELVIN_CHECK(unfinished > 0) << "gradient unit " << unit << " finished twice in one step";
  --unfinished;
  if (!overlap_) return;
  while (started_ < buckets_.size() && unfinished_[started_] == 0) Start(buckets_[started_++]);
  for (const auto& pending : in_flight_) pending->Progress();
}

void GradientBuckets::Wait() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    KELVIN_CHECK(unfinished_[b] == 0)
        << "gradient bucket " << b << " has " << unfinished_[b]
        << " unit(s) whose backward did not finish before the reduction";
  }
  while (started_ < buckets_.size()) Start(buckets_[started_++]);
  for (const auto& pending : in_flight_) pending->Wait();
  in_flight_.clear();
  started_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    unfinished_[b] = static_cast<int>(buckets_[b].units.size());
  }
}

void GradientBuckets::Start(const GradientBucket& bucket) {
  for (const GradientStretch& s : bucket.stretches) {
    Tensor gradients = params_.grads(s.group).Slice(s.begin, s.end);  // [end - begin]
    if (zero_ == nullptr) {
      in_flight_.push_back(replicas_.StartAllReduce(gradients, ReduceOp::kSum));
      continue;
    }
    // Each rank receives the stretch's part inside its shard.
    const StretchOverShards split =
        SplitOverShards(s, zero_->ShardElements(s.group), replicas_.rank(), replicas_.size());
    Tensor received = zero_->ReducedShard(s.group).Slice(
        split.shard_begin, split.shard_begin + split.counts[replicas_.rank()]);
    in_flight_.push_back(
        replicas_.StartReduceScatterUneven(gradients, received, split.counts, ReduceOp::kSum));
  }
}

}  // namespace kelvin::parallel
