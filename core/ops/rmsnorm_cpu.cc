// RMSNorm CPU kernels: OpenMP over rows for y and dx; over column blocks for dweight, so the
// reduction order is fixed and results are bit-identical for any thread count.
#include <algorithm>
#include <cmath>

#include "core/ops/dispatch.h"
#include "core/ops/rmsnorm.h"

namespace kelvin::ops::cpu {
namespace {

constexpr int64_t kColumnBlock = 64;

template <typename T>
void Forward(const T* x, const T* w, double eps, int64_t n, int64_t d, T* y, T* rstd) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* xr = x + row * d;  // [D]
    T* yr = y + row * d;        // [D]
    T sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < d; ++i) sum_sq += xr[i] * xr[i];
    const T r = T(1) / std::sqrt(sum_sq / static_cast<T>(d) + static_cast<T>(eps));
    rstd[row] = r;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * r * w[i];
  }
}

template <typename T>
void Backward(const T* dy, const T* x, const T* w, const T* rstd, int64_t n, int64_t d, T* dx,
              T* dw) {
  // dx_i = r * dy_i * w_i - r^3 / D * x_i * sum_j dy_j w_j x_j
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* dyr = dy + row * d;
    const T* xr = x + row * d;
    T* dxr = dx + row * d;
    const T r = rstd[row];
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 0; i < d; ++i) dot += dyr[i] * w[i] * xr[i];
    const T coeff = r * r * r * dot / static_cast<T>(d);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) dxr[i] = r * dyr[i] * w[i] - coeff * xr[i];
  }
  // dw_i += sum_rows dy_i * x_i * r
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kColumnBlock, end = std::min(d, begin + kColumnBlock);
    T acc[kColumnBlock] = {};
    for (int64_t row = 0; row < n; ++row) {
      const T r = rstd[row];
      const T* dyr = dy + row * d;
      const T* xr = x + row * d;
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) acc[i - begin] += dyr[i] * xr[i] * r;
    }
    for (int64_t i = begin; i < end; ++i) dw[i] += acc[i - begin];
  }
}

}  // namespace

void RmsNormForward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  DispatchCpuFloat(x.dtype(), "RmsNormForward", [&]<typename T>() {
    Forward<T>(x.data<T>(), weight.data<T>(), eps, x.dim(0), x.dim(1), y.data<T>(), rstd.data<T>());
  });
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                     Tensor& dx, Tensor& dweight) {
  DispatchCpuFloat(x.dtype(), "RmsNormBackward", [&]<typename T>() {
    Backward<T>(dy.data<T>(), x.data<T>(), weight.data<T>(), rstd.data<T>(), x.dim(0), x.dim(1),
                dx.data<T>(), dweight.data<T>());
  });
}

}  // namespace kelvin::ops::cpu
