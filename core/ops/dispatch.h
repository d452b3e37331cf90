// Dtype dispatch and argument checks shared by the op implementations.
#pragma once

#include <initializer_list>
#include <string_view>

#include "core/bf16.h"
#include "core/check.h"
#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// Calls fn.template operator()<T>() with T = float or double (CPU kernels).
template <typename Fn>
void DispatchCpuFloat(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn.template operator()<float>();
      return;
    case DType::kF64:
      fn.template operator()<double>();
      return;
    default:
      KELVIN_FATAL() << op << " on CPU supports f32 and f64, got " << DTypeName(dtype);
  }
}

// Calls fn.template operator()<T>() with T = float, bf16 or double: the storage type of any
// floating dtype (CPU casts and fills).
template <typename Fn>
void DispatchCpuAnyFloat(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn.template operator()<float>();
      return;
    case DType::kBF16:
      fn.template operator()<bf16>();
      return;
    case DType::kF64:
      fn.template operator()<double>();
      return;
    default:
      KELVIN_FATAL() << op << " on CPU supports f32, bf16 and f64, got " << DTypeName(dtype);
  }
}

// Calls fn.template operator()<T>() with T = float or bf16 (CUDA kernels).
template <typename Fn>
void DispatchCudaFloat(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn.template operator()<float>();
      return;
    case DType::kBF16:
      fn.template operator()<bf16>();
      return;
    default:
      KELVIN_FATAL() << op << " on CUDA supports f32 and bf16, got " << DTypeName(dtype);
  }
}

// Aborts unless `t` has exactly `shape` (name used in the message, e.g. "rmsnorm.weight").
void CheckShape(const Tensor& t, const Shape& shape, std::string_view name);
void CheckDType(const Tensor& t, DType dtype, std::string_view name);
// Aborts unless every tensor lives on ctx's device.
void CheckDevice(const Context& ctx, std::initializer_list<const Tensor*> tensors,
                 std::string_view op);

}  // namespace kelvin::ops
