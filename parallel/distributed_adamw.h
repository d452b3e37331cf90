// ZeRO-1, Megatron's distributed optimizer, over a data-parallel group of D ranks: each parameter
// group's flat gradient buffer of E elements lies in a zero-padded one of D*S (S = ceil(E / D);
// ParameterSet::Allocate with gradient_shards D) that is reduce-scattered (summed) in place, so
// that rank r holds the reduced gradient of its contiguous shard [r*S, min((r+1)*S, E)); AdamW
// updates only that shard of the master weights, with Adam moments for the shard only (1/D of the
// optimizer state); the updated shards are all-gathered, through the then free gradient buffer,
// into every rank's master weights (and a bf16 model copy refreshed from them). No exchange
// buffer beyond the [S] shard: the gradient memory stays E + S. Unlike Megatron the f32
// masters stay whole on every rank (sharding them too would save 4 bytes per parameter x
// (D-1)/D). Equal to AdamWOptimizer after a gradient all-reduce, up to the summation order of the
// reduction.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/optim/adamw_optimizer.h"
#include "core/optim/parameter_set.h"
#include "parallel/communicator.h"

namespace kelvin::parallel {

class DistributedAdamW {
 public:
  DistributedAdamW(ParameterSet& params, const AdamWSettings& settings, Communicator& dp);

  // Sums every rank's accumulated gradients into this rank's shards (the full gradient buffers
  // are left as they were until Step).
  void ReduceScatterGradients();
  // Sum of squares of this rank's reduced shards, over the elements of the parameters for which
  // `counts(name)` is true (see LlamaModel::IsCanonicalCopy): summed over the DP group (and
  // the model-parallel groups) it is the squared global gradient norm.
  double ShardSumOfSquares(const std::function<bool(const std::string&)>& counts) const;
  // Multiplies the reduced shards by `coefficient` (gradient clipping).
  void ScaleGradients(double coefficient);
  // AdamW on this rank's shards at learning rate `lr`, then the all-gather of the parameters
  // through the gradient buffers (left zeroed).
  void Step(const Context& ctx, double lr);
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // This rank's optimizer state for checkpoints, as AdamWOptimizer::MomentSpans: the moments of
  // the parameters' stretches inside its shards.
  std::vector<MomentSpan> MomentSpans() const;
  int64_t StateBytes() const;  // of the moments' [S] buffers

 private:
  struct GroupShard {
    int64_t elements = 0;  // E
    int64_t shard = 0;     // S = ceil(E / D)
    int64_t begin = 0;     // r * S
    int64_t count = 0;     // elements of the shard inside [0, E): min(S, E - begin), >= 0
    Tensor grad;           // [S] this rank's reduced gradient; in Step its updated masters
    Tensor m, v;           // [S] Adam moments
  };

  ParameterSet& params_;
  AdamWSettings settings_;
  Communicator& dp_;
  GroupShard groups_[kNumParamGroups];
  int64_t steps_ = 0;
};

}  // namespace kelvin::parallel
