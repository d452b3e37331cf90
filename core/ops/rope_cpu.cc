// RoPE CPU kernel: OpenMP over tokens (threaded above kParallelElements, as the elementwise ops);
// each thread fills a cos/sin table [d/2] for its token once and rotates all H heads with it (simd
// over the d/2 pairs).
#include <cmath>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/rope.h"

namespace kelvin::ops::cpu {
namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward); cos and sin are multiplied by
// `factor` (the scaling's attention factor) as transformers' rotary embedding does. y may be x:
// pair i reads x[i] and x[i + d/2] before writing them.
template <typename T>
void Rotate(const T* x, const int32_t* positions, const T* inv_freq, int64_t n, int64_t heads,
            int64_t d, T sign, T factor, T* y) {
  const int64_t half = d / 2;
#pragma omp parallel if (n * heads * d >= kParallelElements)
  {
    std::vector<T> cos_table(static_cast<size_t>(half)), sin_table(static_cast<size_t>(half));
    const T* c = cos_table.data();  // [d/2]
    const T* s = sin_table.data();  // [d/2] sign * sin
#pragma omp for schedule(static)
    for (int64_t token = 0; token < n; ++token) {
      const T position = static_cast<T>(positions[token]);
      for (int64_t i = 0; i < half; ++i) {
        const T angle = position * inv_freq[i];
        cos_table[i] = std::cos(angle) * factor;
        sin_table[i] = sign * (std::sin(angle) * factor);
      }
      for (int64_t head = 0; head < heads; ++head) {
        const T* xr = x + (token * heads + head) * d;  // [d]
        T* yr = y + (token * heads + head) * d;        // [d]
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const T first = xr[i], second = xr[i + half];
          yr[i] = first * c[i] - second * s[i];
          yr[i + half] = second * c[i] + first * s[i];
        }
      }
    }
  }
}

}  // namespace

void Rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeDirection direction,
          Tensor& y, double attention_factor) {
  DispatchCpuFloat(x.dtype(), "Rope", [&]<typename T>() {
    Rotate<T>(x.data<T>(), positions.data<int32_t>(), inv_freq.data<T>(), x.dim(0), x.dim(1),
              x.dim(2), direction == RopeDirection::kForward ? T(1) : T(-1),
              static_cast<T>(attention_factor), y.data<T>());
  });
}

}  // namespace kelvin::ops::cpu
