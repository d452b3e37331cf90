// Gradient norm and clipping: argument checks, dispatch of the sum of squares to the CPU or CUDA
// kernel, and the clipping arithmetic (scaling through ops::Scale).
#include "core/ops/grad_norm.h"

#include <algorithm>
#include <cmath>

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

namespace kelvin::ops {

double SumOfSquares(const Context& ctx, const Tensor& x) {
  return SumOfSquares(ctx, std::vector<Tensor>{x});
}

double SumOfSquares(const Context& ctx, const std::vector<Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KELVIN_CHECK(t.defined()) << "SumOfSquares: tensor " << i << " is undefined";
    KELVIN_CHECK(IsFloating(t.dtype()))
        << "SumOfSquares: tensor " << i << " is " << t.ToString() << ", expected a float dtype";
    CheckDevice(ctx, {&t}, "SumOfSquares");
  }
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::SumOfSquares(ctx, tensors);
#endif
  return cpu::SumOfSquares(tensors);
}

double GlobalL2Norm(const Context& ctx, const std::vector<Tensor>& tensors) {
  return std::sqrt(SumOfSquares(ctx, tensors));
}

double ClipCoefficient(double total_norm, double max_norm) {
  return std::min(max_norm / (total_norm + 1e-6), 1.0);
}

double ClipByGlobalNorm(const Context& ctx, std::vector<Tensor>& tensors, double max_norm) {
  KELVIN_CHECK(max_norm > 0) << "ClipByGlobalNorm: max_norm must be > 0, got " << max_norm;
  const double norm = GlobalL2Norm(ctx, tensors);
  const double coefficient = ClipCoefficient(norm, max_norm);
  if (coefficient < 1) {
    for (Tensor& t : tensors) Scale(ctx, t, coefficient, t);
  }
  return norm;
}

}  // namespace kelvin::ops
