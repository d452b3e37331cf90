// ParameterGather: ZeRO-1's all-gather of the updated parameters in the gradient buckets, started
// after the optimizer step and waited for bucket by bucket only when the next forward first reads
// one of a bucket's units, so that each gather runs while the layers before it compute (Megatron's
// overlapped parameter gather). Data movement only: the model gets the bits that
// DistributedAdamW's gather of the whole buffers gives it.
#pragma once

#include <memory>
#include <vector>

#include "core/optim/parameter_set.h"
#include "parallel/comm/communicator.h"
#include "parallel/distributed_adamw.h"
#include "parallel/gradient_buckets.h"

namespace kelvin::parallel {

class ParameterGather {
 public:
  // `buckets` over the model's units as PlanGradientBuckets made them (the backward's order, so
  // the forward reads the last bucket first); `zero` the optimizer over `replicas` whose shards are
  // gathered: its Step starts this gather from now on instead of gathering itself.
  ParameterGather(ParameterSet& params, Communicator& replicas, std::vector<GradientBucket> buckets,
                  DistributedAdamW& zero);
  ~ParameterGather();  // waits for what is in flight
  ParameterGather(const ParameterGather&) = delete;
  ParameterGather& operator=(const ParameterGather&) = delete;

  // Every bucket's all-gather of the shards of the updated master weights into its stretches of
  // the gradient buffers (free after the step), from the last bucket to the first: the order the
  // forward needs them in (every replica starts them in this order).
  void Start();
  // Before the forward reads `unit`'s parameters: waits for the unit's bucket, rounds its gathered
  // masters into the model's values and zeroes its stretches for the backward to accumulate into;
  // the gathers still in flight progress. A no-op for a bucket already waited for.
  void WaitFor(int unit);
  // Waits for every bucket still in flight, as WaitFor: before anything but the next step's
  // forward reads the model (evaluation, checkpoints, export) or the gradient buffers.
  void WaitAll();
  // Whether a bucket is still in flight: its stretches of the gradient buffers hold gathered
  // masters, not gradients, until it is waited for.
  bool in_flight() const { return waiting_ > 0; }

 private:
  void Finish(int bucket);

  ParameterSet& params_;
  Communicator& replicas_;
  std::vector<GradientBucket> buckets_;
  DistributedAdamW& zero_;
  std::vector<int> bucket_of_unit_;  // [units]
  // [buckets] each bucket's collectives in flight (one per stretch), empty once waited for.
  std::vector<std::vector<std::unique_ptr<PendingCollective>>> in_flight_;
  std::vector<bool> started_;  // [buckets] started and not yet waited for
  int waiting_ = 0;            // buckets started and not yet waited for
};

}  // namespace kelvin::parallel
