// AdamW over parameter groups.
#include "core/optim/adamw_optimizer.h"

#include <algorithm>

#include "core/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/grad_norm.h"

namespace kelvin {

ops::AdamWHyperParams GroupHyperParams(const AdamWSettings& settings, ParamGroup group, double lr) {
  ops::AdamWHyperParams hp{lr, settings.beta1, settings.beta2, settings.eps,
                           group == ParamGroup::kDecay ? settings.weight_decay : 0.0};
  if (group == ParamGroup::kTemperature) hp.lr *= settings.temperature_lr_scale;
  return hp;
}

AdamWOptimizer::AdamWOptimizer(ParameterSet& params, const AdamWSettings& settings)
    : params_(params), settings_(settings) {
  KELVIN_CHECK(params.allocated()) << "AdamWOptimizer needs allocated parameters";
  KELVIN_CHECK(!params.masters_sharded())
      << "AdamWOptimizer needs whole master weights: allocate with gradient_shards 1, or step "
         "with DistributedAdamW";
  for (int g = 0; g < kNumParamGroups; ++g) {
    const Tensor& masters = params.masters(static_cast<ParamGroup>(g));
    if (!masters.defined()) continue;
    m_[g] = Zeros(params.context(), masters.shape(), masters.dtype());
    v_[g] = Zeros(params.context(), masters.shape(), masters.dtype());
  }
}

double AdamWOptimizer::GradientSumOfSquares(const CountsTowardsNorm& counts) {
  std::vector<Tensor> counted;  // every replica holds the whole reduced gradients
  for (const ParameterSet::Entry& e : params_.entries()) {
    if (e.trainable && counts(e.name)) counted.push_back(e.grad);
  }
  return ops::SumOfSquares(params_.context(), counted);
}

void AdamWOptimizer::ScaleGradients(double coefficient) {
  for (int g = 0; g < kNumParamGroups; ++g) {
    Tensor& grads = params_.grads(static_cast<ParamGroup>(g));
    if (grads.defined()) ops::Scale(params_.context(), grads, coefficient, grads);
  }
}

void AdamWOptimizer::Restored(int64_t steps_taken) {
  params_.SyncModelCopy();
  steps_ = steps_taken;
}

void AdamWOptimizer::Step(const Context& ctx, double lr) {
  ++steps_;
  for (int g = 0; g < kNumParamGroups; ++g) {
    const auto group = static_cast<ParamGroup>(g);
    if (!params_.masters(group).defined()) continue;
    Tensor model_copy = params_.has_model_copy() ? params_.values(group) : Tensor();
    ops::AdamWStep(ctx, params_.masters(group), params_.grads(group), m_[g], v_[g], model_copy,
                   GroupHyperParams(settings_, group, lr), steps_);
  }
}

std::vector<OptimizerSpan> OptimizerSpansOf(const ParameterSet& params, ParamGroup group,
                                            int64_t begin, const Tensor& master, const Tensor& m,
                                            const Tensor& v) {
  const int64_t end = begin + m.numel();
  std::vector<OptimizerSpan> spans;
  for (const ParameterSet::Entry& e : params.entries()) {
    if (!e.trainable || e.group != group) continue;
    const int64_t first = std::max(begin, e.offset);
    const int64_t last = std::min(end, e.offset + NumElements(e.shape));
    if (first >= last) continue;
    const int64_t lo = first - begin, hi = last - begin;
    spans.push_back({e.name, first - e.offset, last - first, master.Slice(lo, hi), m.Slice(lo, hi),
                     v.Slice(lo, hi)});
  }
  return spans;
}

std::vector<OptimizerSpan> AdamWOptimizer::StateSpans() const {
  std::vector<OptimizerSpan> spans;
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (!m_[g].defined()) continue;
    const auto group_id = static_cast<ParamGroup>(g);
    std::vector<OptimizerSpan> group =
        OptimizerSpansOf(params_, group_id, 0, params_.masters(group_id), m_[g], v_[g]);
    spans.insert(spans.end(), group.begin(), group.end());
  }
  return spans;
}

int64_t AdamWOptimizer::StateBytes() const {
  int64_t bytes = 0;
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (m_[g].defined()) bytes += static_cast<int64_t>(m_[g].nbytes() + v_[g].nbytes());
  }
  return bytes;
}

}  // namespace kelvin
