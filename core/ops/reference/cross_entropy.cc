// Naive cross-entropy in f64: lse = max + log(sum exp(x - max)), loss = lse - x[target],
// gradient = scale * (exp(x - lse) - onehot(target)); kIgnoreIndex rows give 0. N tokens, V vocab.
#include "core/ops/reference/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "core/ops/cross_entropy.h"
#include "core/ops/reference/values.h"

namespace kelvin::reference {

void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  const std::vector<double> x = ToDoubles(logits), t = ToDoubles(targets);
  std::vector<double> loss_v(static_cast<size_t>(n)), lse_v(static_cast<size_t>(n));
  for (int64_t row = 0; row < n; ++row) {
    const double* xr = x.data() + row * v;
    const double max = *std::max_element(xr, xr + v);
    double sum = 0;
    for (int64_t i = 0; i < v; ++i) sum += std::exp(xr[i] - max);
    lse_v[row] = max + std::log(sum);
    const auto target = static_cast<int64_t>(t[row]);
    loss_v[row] = target == ops::kIgnoreIndex ? 0.0 : lse_v[row] - xr[target];
  }
  FromDoubles(loss_v, loss);
  FromDoubles(lse_v, lse);
}

void CrossEntropyBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                          double grad_scale) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  std::vector<double> x = ToDoubles(logits);
  const std::vector<double> t = ToDoubles(targets), lse_v = ToDoubles(lse);
  for (int64_t row = 0; row < n; ++row) {
    const auto target = static_cast<int64_t>(t[row]);
    for (int64_t i = 0; i < v; ++i) {
      double& g = x[row * v + i];
      g = target == ops::kIgnoreIndex
              ? 0.0
              : grad_scale * (std::exp(g - lse_v[row]) - (i == target ? 1.0 : 0.0));
    }
  }
  FromDoubles(x, logits);
}

}  // namespace kelvin::reference
