// AdamW over parameter groups.
#include "core/optim/adamw_optimizer.h"

#include "core/copy.h"

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
    const Tensor& masters = params.masters(static_cast<ParamGroup>(g));
    if (!masters.defined()) continue;
    m_[g] = Zeros(params.context(), masters.shape(), masters.dtype());
    v_[g] = Zeros(params.context(), masters.shape(), masters.dtype());
  }
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
