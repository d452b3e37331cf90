// DType sizes and names.
#include "core/dtype.h"

#include "core/check.h"

namespace kelvin {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  KELVIN_FATAL() << "unknown dtype " << static_cast<int>(dtype);
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
  }
  return "unknown";
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF64;
}

DType AccumDType(DType dtype) { return dtype == DType::kF64 ? DType::kF64 : DType::kF32; }

}  // namespace kelvin
