// DistributedAdamW: ZeRO-1, Megatron's distributed optimizer, over a data-parallel group of D
// ranks: gradients are reduce-scattered so that each rank updates only its shard of the master
// weights (with Adam moments for the shard only), and the updated shards are all-gathered into
// every rank's model. Equal to AdamWOptimizer after a gradient all-reduce, up to the summation
// order of the reduction.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/optim/adamw_optimizer.h"
#include "core/optim/optimizer.h"
#include "core/optim/parameter_set.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// Each parameter group's flat gradient buffer of E elements lies in a zero-padded one of D*S
// (S = ceil(E / D); ParameterSet::Allocate with gradient_shards D) that is reduce-scattered
// (summed, by GradientBuckets), so that rank r holds the reduced gradient of its contiguous shard
// [r*S, min((r+1)*S, E)); the updated shards are all-gathered through the then free gradient
// buffer. With a model copy (bf16 training, or the CPU tests' separate f32 masters) the f32 masters
// are sharded too: this rank keeps its [S] shard and the whole masters exist only while gathered
// into the gradient buffers (parameter_set.h), which saves 4 bytes per parameter x (D-1)/D.
// Without one the masters are the model's values, whole on every rank. Per rank: the optimizer
// state 12 S bytes (masters and moments) or 8 S (moments), the gradients D*S + S elements (the
// padded buffer and the reduced shard).
class DistributedAdamW final : public Optimizer {
 public:
  // Takes this rank's shard of the masters (with sharded masters, from the whole ones the model
  // initialised or loaded into the gradient buffers, which it then clears for the first step).
  DistributedAdamW(ParameterSet& params, const AdamWSettings& settings, Communicator& dp);

  // Where the step's reduction (GradientBuckets) leaves the sum over the group of rank r's
  // shard [r S, (r + 1) S) of group's padded gradient buffer: this rank's [S] tensor, and S
  // (0 for an empty group). The full gradient buffers are left as they were until Step.
  Tensor& ReducedShard(ParamGroup group) { return groups_[static_cast<int>(group)].grad; }
  int64_t ShardElements(ParamGroup group) const { return groups_[static_cast<int>(group)].shard; }
  // [count] this rank's shard of group's master weights inside [0, E) (no elements when the shard
  // lies in the padding): what every rank's model receives of it after Step.
  Tensor MasterShard(ParamGroup group) const;
  // From now on Step updates the shards only and calls `refresh` (ParameterGather::Start), which
  // must bring every shard into every rank's model before the model is next read. Without it Step
  // gathers the whole buffers itself before it returns.
  void RefreshModelThrough(std::function<void()> refresh) { refresh_ = std::move(refresh); }
  // Over this rank's reduced shards, summed over the DP group.
  double GradientSumOfSquares(const CountsTowardsNorm& counts) override;
  void ScaleGradients(double coefficient) override;  // the reduced shards
  // AdamW on this rank's shards at learning rate `lr`, then RefreshModelFromShards (the gradient
  // buffers left zeroed) or the refresh of RefreshModelThrough.
  void Step(const Context& ctx, double lr) override;

  // RefreshModelFromShards after the shards were restored.
  void Restored(int64_t steps_taken) override;
  // With sharded masters: every rank's shard gathered into the gradient buffers, where
  // ParameterSet::master() and MasterOnHost read the whole masters until ReleaseMasters clears
  // them. No-ops when the masters are whole anyway.
  void GatherMasters() override;
  void ReleaseMasters() override;

  int64_t steps_taken() const override { return steps_; }
  // The master weights and moments of the parameters' stretches inside this rank's shards.
  std::vector<OptimizerSpan> StateSpans() const override;
  int64_t StateBytes() const override;        // of the moments' [S] buffers
  int64_t MasterShardBytes() const override;  // of the masters' [S] shards (0 when not sharded)
  bool ShardsState() const override { return true; }

 private:
  struct GroupShard {
    int64_t elements = 0;  // E
    int64_t shard = 0;     // S = ceil(E / D)
    int64_t begin = 0;     // r * S
    int64_t count = 0;     // elements of the shard inside [0, E): min(S, E - begin), >= 0
    Tensor grad;           // [S] this rank's reduced gradient; free outside a step
    Tensor m, v;           // [S] Adam moments
    // [S] its own with sharded masters, else a [count] view of the model's values
    Tensor master;
  };
  // Every rank's shard of the masters into every rank's model (values); after Step and after a
  // checkpoint restored the shards. Collective over the group, between steps.
  void RefreshModelFromShards();
  // Every rank's master shard, through its (free) `grad`, into the group's padded gradient
  // buffer: with sharded masters there the whole masters (placed by the caller), else copied
  // into the values and the buffer zeroed.
  void AllGatherMasters();

  ParameterSet& params_;
  AdamWSettings settings_;
  Communicator& dp_;
  std::function<void()> refresh_;  // RefreshModelThrough's; empty: RefreshModelFromShards
  GroupShard groups_[kNumParamGroups];
  int64_t steps_ = 0;
};

}  // namespace kelvin::parallel
