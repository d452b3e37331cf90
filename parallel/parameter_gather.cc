// The buckets' uneven all-gathers of the master shards into the gradient buffers, and on each
// bucket's wait the gathered masters rounded into the model's values.
#include "parallel/parameter_gather.h"

#include <utility>

#include "core/check.h"
#include "core/copy.h"
#include "core/ops/elementwise.h"

namespace kelvin::parallel {

ParameterGather::ParameterGather(ParameterSet& params, Communicator& replicas,
                                 std::vector<GradientBucket> buckets, DistributedAdamW& zero)
    : params_(params),
      replicas_(replicas),
      buckets_(std::move(buckets)),
      zero_(zero),
      bucket_of_unit_(BucketOfUnit(buckets_)),
      in_flight_(buckets_.size()),
      started_(buckets_.size(), false) {
  zero_.RefreshModelThrough([this] { Start(); });
}

ParameterGather::~ParameterGather() {
  zero_.RefreshModelThrough(nullptr);
  for (auto& bucket : in_flight_) {
    for (const auto& pending : bucket) pending->Wait();  // nothing is left half-received
  }
}

void ParameterGather::Start() {
  KELVIN_CHECK(waiting_ == 0) << "ParameterGather::Start with " << waiting_
                              << " bucket(s) of the last gather not waited for";
  for (int b = static_cast<int>(buckets_.size()) - 1; b >= 0; --b) {
    for (const GradientStretch& s : buckets_[static_cast<size_t>(b)].stretches) {
      // [end - begin]: every rank's part of the stretch, in rank order.
      Tensor gathered = params_.grads(s.group).Slice(s.begin, s.end);
      const StretchOverShards split =
          SplitOverShards(s, zero_.ShardElements(s.group), replicas_.rank(), replicas_.size());
      const Tensor mine = zero_.MasterShard(s.group).Slice(
          split.shard_begin, split.shard_begin + split.counts[replicas_.rank()]);
      in_flight_[static_cast<size_t>(b)].push_back(
          replicas_.StartAllGatherUneven(mine, gathered, split.counts));
    }
    started_[static_cast<size_t>(b)] = true;
    ++waiting_;
  }
}

void ParameterGather::WaitFor(int unit) {
  KELVIN_CHECK(unit >= 0 && unit < static_cast<int>(bucket_of_unit_.size()))
      << "parameter unit " << unit << " of " << bucket_of_unit_.size();
  const int bucket = bucket_of_unit_[static_cast<size_t>(unit)];
  if (started_[static_cast<size_t>(bucket)]) Finish(bucket);
  for (auto& pending_bucket : in_flight_) {
    for (const auto& pending : pending_bucket) pending->Progress();
  }
}

void ParameterGather::WaitAll() {
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    if (started_[static_cast<size_t>(b)]) Finish(b);
  }
}

void ParameterGather::Finish(int bucket) {
  for (const auto& pending : in_flight_[static_cast<size_t>(bucket)]) pending->Wait();
  in_flight_[static_cast<size_t>(bucket)].clear();
  const Context& ctx = params_.context();
  for (const GradientStretch& s : buckets_[static_cast<size_t>(bucket)].stretches) {
    Tensor gathered = params_.grads(s.group).Slice(s.begin, s.end);  // [end - begin] masters
    Tensor values = params_.values(s.group).Slice(s.begin, s.end);
    ops::Cast(ctx, gathered, values);
    Zero(ctx, gathered);
  }
  started_[static_cast<size_t>(bucket)] = false;
  --waiting_;
}

}  // namespace kelvin::parallel
