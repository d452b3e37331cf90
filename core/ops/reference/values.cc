// Conversion between host tensors of every dtype and vectors of double.
#include "core/ops/reference/values.h"

namespace kelvin::reference {

std::vector<double> ToDoubles(const Tensor& t) {
  KELVIN_CHECK(t.is_cpu()) << "reference ops take host tensors, got " << t.ToString();
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (t.dtype()) {
      case DType::kF32:
        v = t.data<float>()[i];
        break;
      case DType::kBF16:
        v = static_cast<float>(t.data<bf16>()[i]);
        break;
      case DType::kF64:
        v = t.data<double>()[i];
        break;
      case DType::kI32:
        v = t.data<int32_t>()[i];
        break;
      case DType::kI64:
        v = static_cast<double>(t.data<int64_t>()[i]);
        break;
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

void FromDoubles(const std::vector<double>& values, Tensor& t) {
  KELVIN_CHECK(t.is_cpu()) << "reference ops write host tensors, got " << t.ToString();
  KELVIN_CHECK_EQ(static_cast<int64_t>(values.size()), t.numel()) << t.ToString();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = values[static_cast<size_t>(i)];
    switch (t.dtype()) {
      case DType::kF32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kBF16:
        t.data<bf16>()[i] = bf16(static_cast<float>(v));
        break;
      case DType::kF64:
        t.data<double>()[i] = v;
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kI64:
        t.data<int64_t>()[i] = static_cast<int64_t>(v);
        break;
    }
  }
}

}  // namespace kelvin::reference
