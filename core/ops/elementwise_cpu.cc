// Elementwise CPU kernels: one ForEachIndex loop (OpenMP + simd) over the flat elements per op.
// Index i reads its inputs before writing out[i], so outputs may alias inputs.
#include <cstdint>
#include <type_traits>

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

namespace kelvin::ops::cpu {
namespace {

// One element converted between storage types (bf16 through f32, which holds it exactly).
template <typename To, typename From>
To Convert(From value) {
  if constexpr (std::is_same_v<To, bf16> && std::is_same_v<From, double>) {
    return Bf16FromDouble(value);
  } else if constexpr (std::is_same_v<To, bf16>) {
    return bf16(static_cast<float>(value));
  } else if constexpr (std::is_same_v<From, bf16>) {
    return static_cast<To>(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

template <typename From, typename To>
void CastKernel(const From* x, int64_t n, To* out) {
  ForEachIndex(n, [=](int64_t i) { out[i] = Convert<To>(x[i]); });
}

template <typename T>
void FillKernel(T value, int64_t n, T* t) {
  ForEachIndex(n, [=](int64_t i) { t[i] = value; });
}

}  // namespace

void Add(const Tensor& a, const Tensor& b, Tensor& out) {
  DispatchCpuFloat(a.dtype(), "Add", [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    ForEachIndex(a.numel(), [=](int64_t i) { po[i] = pa[i] + pb[i]; });
  });
}

void Scale(const Tensor& x, double alpha, Tensor& out) {
  DispatchCpuFloat(x.dtype(), "Scale", [&]<typename T>() {
    const T a = static_cast<T>(alpha);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    ForEachIndex(x.numel(), [=](int64_t i) { po[i] = a * px[i]; });
  });
}

void Axpy(double alpha, const Tensor& x, Tensor& y) {
  DispatchCpuFloat(y.dtype(), "Axpy", [&]<typename T>() {
    const T a = static_cast<T>(alpha);
    T* py = y.data<T>();
    if (x.dtype() == DType::kBF16) {  // bf16 gradient into an f32 accumulator
      const bf16* px = x.data<bf16>();
      ForEachIndex(y.numel(), [=](int64_t i) { py[i] += a * Convert<T>(px[i]); });
    } else {
      const T* px = x.data<T>();
      ForEachIndex(y.numel(), [=](int64_t i) { py[i] += a * px[i]; });
    }
  });
}

void Cast(const Tensor& x, Tensor& out) {
  DispatchCpuAnyFloat(x.dtype(), "Cast", [&]<typename From>() {
    DispatchCpuAnyFloat(out.dtype(), "Cast", [&]<typename To>() {
      CastKernel(x.data<From>(), x.numel(), out.data<To>());
    });
  });
}

void Fill(Tensor& t, double value) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kI32:
      return FillKernel(static_cast<int32_t>(value), n, t.data<int32_t>());
    case DType::kI64:
      return FillKernel(static_cast<int64_t>(value), n, t.data<int64_t>());
    default:
      DispatchCpuAnyFloat(t.dtype(), "Fill",
                          [&]<typename T>() { FillKernel(Convert<T>(value), n, t.data<T>()); });
  }
}

}  // namespace kelvin::ops::cpu
