// GradientBuckets: a step's sum of the gradients over the data-parallel replicas, in buckets that
// each start as soon as the backward has finished every gradient in them, so that the reduction
// runs while the layers before them are still in their backward (Megatron's overlapped gradient
// reduction). Without overlap the same buckets are reduced, in the same order, after the backward:
// the results are the same bits either way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/optim/parameter_set.h"
#include "parallel/comm/communicator.h"
#include "parallel/distributed_adamw.h"

namespace kelvin::parallel {

// Elements [begin, end) of one group's flat gradient buffer.
struct GradientStretch {
  ParamGroup group = ParamGroup::kDecay;
  int64_t begin = 0, end = 0;
};

struct GradientBucket {
  std::vector<int> units;                  // the units (see PlanGradientBuckets) it holds
  std::vector<GradientStretch> stretches;  // their parameters' gradients, adjacent ones merged
  int64_t elements = 0;
};

// Buckets over `units`, lists of parameter names in the order a step's backward finishes their
// gradients: consecutive units joined until a bucket holds at least `bucket_elements` (the last
// one may hold fewer). Every parameter of `params` must be in exactly one unit (checked).
std::vector<GradientBucket> PlanGradientBuckets(const ParameterSet& params,
                                                const std::vector<std::vector<std::string>>& units,
                                                int64_t bucket_elements);

// [units] the bucket that holds each unit.
std::vector<int> BucketOfUnit(const std::vector<GradientBucket>& buckets);

// A stretch over ZeRO-1's shards, rank r's being [r S, (r + 1) S) of the padded buffer: `counts`
// [ranks] the elements of the stretch inside each rank's shard (in rank order, they tile it),
// and this rank's part [shard_begin, shard_begin + counts[rank]) of its shard.
struct StretchOverShards {
  std::vector<int64_t> counts;
  int64_t shard_begin = 0;
};
StretchOverShards SplitOverShards(const GradientStretch& stretch, int64_t shard_elements, int rank,
                                  int ranks);

class GradientBuckets {
 public:
  // Sums over `replicas` in place (each rank's gradient buffers then hold the sum), or with
  // `zero` into its reduced shards (ZeRO-1: each rank receives the sum of its own shard's
  // stretch of every bucket). `overlap`: start each bucket once its units finished.
  GradientBuckets(ParameterSet& params, Communicator& replicas, std::vector<GradientBucket> buckets,
                  bool overlap, DistributedAdamW* zero = nullptr);
  ~GradientBuckets();

  // `unit`'s gradients are final for this step: with overlap, every bucket whose units have all
  // finished starts, in bucket order (every replica starts the same ones in the same order), and
  // the ones in flight progress.
  void Finished(int unit);
  // The step's whole reduction: starts the buckets not started yet, in order, and waits for all
  // (every unit must have finished); the next step starts afresh.
  void Wait();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }

 private:
  void Start(const GradientBucket& bucket);

  ParameterSet& params_;
  Communicator& replicas_;
  std::vector<GradientBucket> buckets_;
  bool overlap_;
  DistributedAdamW* zero_;
  std::vector<int> bucket_of_unit_;  // [units]
  std::vector<int> unfinished_;      // [buckets] units not finished this step
  size_t started_ = 0;               // the buckets [0, started_) are started
  std::vector<std::unique_ptr<PendingCollective>> in_flight_;
};

}  // namespace kelvin::parallel
