// Element types of Kelvin tensors: their sizes, names, and the accumulation type each one uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/bf16.h"

namespace kelvin {

enum class DType : uint8_t { kF32, kBF16, kF64, kI32, kI64 };

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);  // "f32", "bf16", "f64", "i32", "i64"
bool IsFloating(DType dtype);

// The type statistics and parameter gradients are kept in for activations of `dtype`:
// f64 stays f64 (tests), f32 and bf16 accumulate in f32.
DType AccumDType(DType dtype);

// Maps a C++ element type to its DType (DTypeOf<float>() == DType::kF32).
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kF64;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kI64;
}

}  // namespace kelvin
