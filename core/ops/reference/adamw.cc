// Naive AdamW in f64, line for line torch.optim.AdamW's _single_tensor_adamw (n parameters).
#include "core/ops/reference/adamw.h"

#include <cmath>

#include "core/ops/reference/values.h"

namespace kelvin::reference {

void AdamWStep(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& model,
               const ops::AdamWHyperParams& hp, int64_t step) {
  std::vector<double> param = ToDoubles(master), exp_avg = ToDoubles(m), exp_avg_sq = ToDoubles(v);
  const std::vector<double> g = ToDoubles(grad);
  const double bias_correction1 = 1 - std::pow(hp.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(hp.beta2, static_cast<double>(step));
  const double step_size = hp.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t i = 0; i < param.size(); ++i) {
    param[i] *= 1 - hp.lr * hp.weight_decay;
    exp_avg[i] += (1 - hp.beta1) * (g[i] - exp_avg[i]);
    exp_avg_sq[i] = exp_avg_sq[i] * hp.beta2 + (1 - hp.beta2) * g[i] * g[i];
    const double denom = std::sqrt(exp_avg_sq[i]) / bias_correction2_sqrt + hp.eps;
    param[i] += -step_size * exp_avg[i] / denom;
  }
  FromDoubles(param, master);
  FromDoubles(exp_avg, m);
  FromDoubles(exp_avg_sq, v);
  if (model.defined()) FromDoubles(param, model);
}

}  // namespace kelvin::reference
