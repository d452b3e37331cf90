// Naive RoPE in f64: each (i, i + d/2) pair of each head rotated by position * inv_freq[i].
#include "core/ops/reference/rope.h"

#include <cmath>

#include "core/ops/reference/values.h"

namespace kelvin::reference {
namespace {

// v rounded to `dtype` (f32 or f64).
double RoundTo(double v, DType dtype) {
  return dtype == DType::kF32 ? static_cast<double>(static_cast<float>(v)) : v;
}

// sign = +1: y = R(angle) x; sign = -1: y = R(-angle) x = R(angle)^T x.
void Rotate(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, double sign,
            double attention_factor, Tensor& y) {
  const int64_t n = x.dim(0), heads = x.dim(1), d = x.dim(2), half = d / 2;
  const std::vector<double> xv = ToDoubles(x), pos = ToDoubles(positions),
                            freq = ToDoubles(inv_freq);
  const DType angle_dtype = inv_freq.dtype();
  std::vector<double> yv(xv.size());
  for (int64_t token = 0; token < n; ++token) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = RoundTo(RoundTo(pos[token], angle_dtype) * freq[i], angle_dtype);
      const double c = std::cos(angle) * attention_factor;
      const double s = sign * std::sin(angle) * attention_factor;
      for (int64_t head = 0; head < heads; ++head) {
        const int64_t at = (token * heads + head) * d + i;
        yv[at] = xv[at] * c - xv[at + half] * s;
        yv[at + half] = xv[at + half] * c + xv[at] * s;
      }
    }
  }
  FromDoubles(yv, y);
}

}  // namespace

void RopeForward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y,
                 double attention_factor) {
  Rotate(x, positions, inv_freq, 1.0, attention_factor, y);
}

void RopeBackward(const Tensor& dy, const Tensor& positions, const Tensor& inv_freq, Tensor& dx,
                  double attention_factor) {
  Rotate(dy, positions, inv_freq, -1.0, attention_factor, dx);
}

}  // namespace kelvin::reference
