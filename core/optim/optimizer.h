// Optimizer: what the trainer and checkpoints ask of an update rule over a ParameterSet, whoever
// holds its state: AdamWOptimizer (every data-parallel replica the whole state) or
// parallel::DistributedAdamW (ZeRO-1: each replica a shard). A step is, after the gradients were
// summed over the replicas (parallel::GradientBuckets), GradientSumOfSquares and ScaleGradients
// (clipping), then Step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin {

// A stretch of one parameter's optimizer state, as checkpoints keep it: the elements
// [begin, begin + count) of the parameter's (this rank's) tensor in row-major order, of its master
// weights and Adam moments.
struct OptimizerSpan {
  std::string parameter;
  int64_t begin = 0, count = 0;
  // [count] views of the optimizer's storage: copying into them restores the state.
  Tensor master, m, v;
};

// Whether a parameter's gradient counts towards the norm on this rank (each element of the whole
// model once; see LlamaModel::IsCanonicalCopy).
using CountsTowardsNorm = std::function<bool(const std::string& parameter)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // The sum of squares of the reduced gradients of the parameters `counts` names, over the
  // data-parallel replicas, each element once: summed over the model-parallel groups it is the
  // squared global gradient norm. Collective over the replicas where they hold shards.
  virtual double GradientSumOfSquares(const CountsTowardsNorm& counts) = 0;
  // Multiplies the reduced gradients by `coefficient` (clipping).
  virtual void ScaleGradients(double coefficient) = 0;
  // One update at learning rate `lr` from the reduced gradients; the model's values follow.
  virtual void Step(const Context& ctx, double lr) = 0;

  // After a checkpoint was copied into StateSpans: the model's values from the restored masters,
  // and `steps_taken` updates done. Collective over the replicas where they hold shards.
  virtual void Restored(int64_t steps_taken) = 0;
  // Between steps: the whole masters readable through ParameterSet (for an export) until
  // ReleaseMasters. Collective over the replicas where they hold shards.
  virtual void GatherMasters() = 0;
  virtual void ReleaseMasters() = 0;

  virtual int64_t steps_taken() const = 0;
  // This rank's optimizer state for checkpoints: master weights and moments.
  virtual std::vector<OptimizerSpan> StateSpans() const = 0;
  virtual int64_t StateBytes() const = 0;        // of the moments' buffers
  virtual int64_t MasterShardBytes() const = 0;  // of masters kept apart from the model's (ZeRO-1)
  // Whether each data-parallel replica holds a shard of the state (ZeRO-1), not all of it.
  virtual bool ShardsState() const = 0;
};

}  // namespace kelvin
