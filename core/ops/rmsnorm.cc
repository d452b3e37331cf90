// RMSNorm: argument checks and dispatch to the CPU or CUDA kernel.
#include "core/ops/rmsnorm.h"

#include "core/copy.h"
#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

void CheckCommon(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  KELVIN_CHECK_EQ(x.ndim(), 2) << "rmsnorm.x must be [N, D], got " << x.ToString();
  const int64_t n = x.dim(0), d = x.dim(1);
  CheckShape(weight, {d}, "rmsnorm.weight");
  CheckDType(weight, x.dtype(), "rmsnorm.weight");
  CheckShape(rstd, {n}, "rmsnorm.rstd");
  CheckDType(rstd, AccumDType(x.dtype()), "rmsnorm.rstd");
  CheckDevice(ctx, {&x, &weight, &rstd}, "RmsNorm");
}

}  // namespace

void RmsNormForward(const Context& ctx, const Tensor& x, const Tensor& weight, double eps,
                    Tensor& y, Tensor& rstd) {
  CheckCommon(ctx, x, weight, rstd);
  CheckShape(y, x.shape(), "rmsnorm.y");
  CheckDType(y, x.dtype(), "rmsnorm.y");
  CheckDevice(ctx, {&y}, "RmsNormForward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::RmsNormForward(ctx, x, weight, eps, y, rstd);
#endif
  cpu::RmsNormForward(x, weight, eps, y, rstd);
}

void RmsNormBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                     const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  if (!dweight.defined()) {  // frozen weight: the kernels compute dx and dweight in one pass
    Tensor discarded = Zeros(ctx, weight.shape(), AccumDType(x.dtype()));
    return RmsNormBackward(ctx, dy, x, weight, rstd, dx, discarded);
  }
  CheckCommon(ctx, x, weight, rstd);
  CheckShape(dy, x.shape(), "rmsnorm.dy");
  CheckDType(dy, x.dtype(), "rmsnorm.dy");
  CheckShape(dx, x.shape(), "rmsnorm.dx");
  CheckDType(dx, x.dtype(), "rmsnorm.dx");
  CheckShape(dweight, weight.shape(), "rmsnorm.dweight");
  CheckDType(dweight, AccumDType(x.dtype()), "rmsnorm.dweight");
  CheckDevice(ctx, {&dy, &dx, &dweight}, "RmsNormBackward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::RmsNormBackward(ctx, dy, x, weight, rstd, dx, dweight);
#endif
  cpu::RmsNormBackward(dy, x, weight, rstd, dx, dweight);
}

}  // namespace kelvin::ops
