// Sum of squares on the CPU: each tensor is cut into fixed blocks of kBlock elements, summed in
// f64 in parallel, and the block sums are added in order, so the result does not depend on the
// thread count.
#include <algorithm>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/ops/grad_norm.h"

namespace kelvin::ops::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;

inline double ToDouble(float x) { return x; }
inline double ToDouble(double x) { return x; }
inline double ToDouble(bf16 x) { return static_cast<float>(x); }

// sum_i x_i^2 of x [n].
template <typename T>
double SumOfSquares(const T* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> block_sums(static_cast<size_t>(blocks));  // [blocks]
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = begin; i < end; ++i) sum += ToDouble(x[i]) * ToDouble(x[i]);
    block_sums[static_cast<size_t>(b)] = sum;
  }
  double total = 0;
  for (const double s : block_sums) total += s;
  return total;
}

}  // namespace

double SumOfSquares(const std::vector<Tensor>& tensors) {
  double total = 0;
  for (const Tensor& t : tensors) {
    switch (t.dtype()) {
      case DType::kF32:
        total += SumOfSquares(t.data<float>(), t.numel());
        break;
      case DType::kBF16:
        total += SumOfSquares(t.data<bf16>(), t.numel());
        break;
      case DType::kF64:
        total += SumOfSquares(t.data<double>(), t.numel());
        break;
      default:
        KELVIN_FATAL() << "SumOfSquares on CPU supports f32, bf16, f64, got " << t.ToString();
    }
  }
  return total;
}

}  // namespace kelvin::ops::cpu
