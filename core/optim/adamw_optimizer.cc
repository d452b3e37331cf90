// AdamW over parameter groups.
#include "core/optim/adamw_optimizer.h"

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
  for (int g = 0; g < kNumParamGroups; ++g) {
    const Tensor& values = params.values(static_cast<ParamGroup>(g));
    if (!values.defined()) continue;
    m_[g] = Tensor::ZerosCpu(values.shape(), values.dtype());
    v_[g] = Tensor::ZerosCpu(values.shape(), values.dtype());
  }
}

void AdamWOptimizer::Step(const Context& ctx, double lr) {
  ++steps_;
  for (int g = 0; g < kNumParamGroups; ++g) {
    const auto group = static_cast<ParamGroup>(g);
    if (!params_.values(group).defined()) continue;
    Tensor no_model_copy;
    ops::AdamWStep(ctx, params_.values(group), params_.grads(group), m_[g], v_[g], no_model_copy,
                   GroupHyperParams(settings_, group, lr), steps_);
  }
}

void AppendMomentState(ParamGroup group, const Tensor& m, const Tensor& v,
                       std::vector<std::pair<std::string, Tensor>>& state) {
  static constexpr const char* kGroupNames[kNumParamGroups] = {"decay", "no_decay", "temperature"};
  const std::string name = kGroupNames[static_cast<int>(group)];
  state.emplace_back("adamw.m." + name, m);
  state.emplace_back("adamw.v." + name, v);
}

std::vector<std::pair<std::string, Tensor>> AdamWOptimizer::StateTensors() const {
  std::vector<std::pair<std::string, Tensor>> state;
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (m_[g].defined()) AppendMomentState(static_cast<ParamGroup>(g), m_[g], v_[g], state);
  }
  return state;
}

}  // namespace kelvin
