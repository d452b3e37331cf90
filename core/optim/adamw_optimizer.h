// AdamWOptimizer: AdamW over a ParameterSet's flat groups, with the moments it owns, the same on
// every data-parallel replica (ZeRO-1's sharded one is parallel/distributed_adamw.h). Weight decay
// applies to the kDecay group only (norms and SSA temperature parameters get none); the
// kTemperature group's learning rate is scaled by temperature_lr_scale. The moments live with the
// master weights (their dtype and device); a model copy is refreshed by every step.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/ops/adamw.h"
#include "core/optim/optimizer.h"
#include "core/optim/parameter_set.h"

namespace kelvin {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double temperature_lr_scale = 1.0;
};

// The AdamW hyper-parameters of one parameter group at learning rate `lr`: weight decay for
// kDecay only, the learning rate scaled by temperature_lr_scale for kTemperature.
ops::AdamWHyperParams GroupHyperParams(const AdamWSettings& settings, ParamGroup group, double lr);

// The spans of `group`'s parameters that master, m, v [n] hold, when they are the elements
// [begin, begin + n) of the group's flat buffers (the whole buffers, or ZeRO-1's shard of them).
std::vector<OptimizerSpan> OptimizerSpansOf(const ParameterSet& params, ParamGroup group,
                                            int64_t begin, const Tensor& master, const Tensor& m,
                                            const Tensor& v);

class AdamWOptimizer final : public Optimizer {
 public:
  // Over data-parallel replicas the gradients are summed before GradientSumOfSquares
  // (parallel::GradientBuckets), in place.
  AdamWOptimizer(ParameterSet& params, const AdamWSettings& settings);

  double GradientSumOfSquares(const CountsTowardsNorm& counts) override;
  void ScaleGradients(double coefficient) override;
  // One step at learning rate `lr` from the accumulated gradients (the caller zeroes them after).
  void Step(const Context& ctx, double lr) override;

  void Restored(int64_t steps_taken) override;
  void GatherMasters() override {}  // the masters are whole on every replica
  void ReleaseMasters() override {}

  int64_t steps_taken() const override { return steps_; }
  // Every parameter's master weights and moments (the master weights' dtype and device).
  std::vector<OptimizerSpan> StateSpans() const override;
  int64_t StateBytes() const override;
  int64_t MasterShardBytes() const override { return 0; }
  bool ShardsState() const override { return false; }

 private:
  ParameterSet& params_;
  AdamWSettings settings_;
  Tensor m_[kNumParamGroups], v_[kNumParamGroups];  // [group elements] moments
  int64_t steps_ = 0;
};

}  // namespace kelvin
