// Naive RMSNorm: y = x * (mean(x^2) + eps)^-1/2 * w and its hand-derived backward, in f64.
#include "core/ops/reference/rmsnorm.h"

#include <cmath>

#include "core/ops/reference/values.h"

namespace kelvin::reference {

void RmsNormForward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  const int64_t n = x.dim(0), d = x.dim(1);
  const std::vector<double> xv = ToDoubles(x), w = ToDoubles(weight);
  std::vector<double> yv(xv.size()), r(static_cast<size_t>(n));
  for (int64_t row = 0; row < n; ++row) {
    double mean_sq = 0;
    for (int64_t i = 0; i < d; ++i) mean_sq += xv[row * d + i] * xv[row * d + i];
    mean_sq /= static_cast<double>(d);
    r[row] = 1.0 / std::sqrt(mean_sq + eps);
    for (int64_t i = 0; i < d; ++i) yv[row * d + i] = xv[row * d + i] * r[row] * w[i];
  }
  FromDoubles(yv, y);
  FromDoubles(r, rstd);
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                     Tensor& dx, Tensor& dweight) {
  const int64_t n = x.dim(0), d = x.dim(1);
  const std::vector<double> dyv = ToDoubles(dy), xv = ToDoubles(x), w = ToDoubles(weight),
                            r = ToDoubles(rstd);
  std::vector<double> dxv(xv.size()), dw = ToDoubles(dweight);
  for (int64_t row = 0; row < n; ++row) {
    // y_i = x_i r w_i with r = (sum_j x_j^2 / D + eps)^-1/2, so dr/dx_j = -r^3 x_j / D.
    double dot = 0;
    for (int64_t j = 0; j < d; ++j) dot += dyv[row * d + j] * w[j] * xv[row * d + j];
    const double rr = r[row];
    for (int64_t i = 0; i < d; ++i) {
      dxv[row * d + i] = dyv[row * d + i] * w[i] * rr - rr * rr * rr * xv[row * d + i] * dot / d;
      dw[i] += dyv[row * d + i] * xv[row * d + i] * rr;
    }
  }
  FromDoubles(dxv, dx);
  FromDoubles(dw, dweight);
}

}  // namespace kelvin::reference
