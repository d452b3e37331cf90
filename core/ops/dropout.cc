// Hashed dropout: argument checks, the threshold, and dispatch to the CPU or CUDA kernel.
#include "core/ops/dropout.h"

#include <cmath>

#include "core/ops/dispatch.h"

namespace kelvin::ops {

uint64_t DropoutThreshold(double p) {
  KELVIN_CHECK(p >= 0 && p < 1) << "dropout probability " << p << " is not in [0, 1)";
  return static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)));  // exact: p * 2^53 <= 2^53
}

void HashedDropout(const Context& ctx, const Tensor& x, const Tensor& token_keys, uint64_t site,
                   int64_t feature_begin, double p, Tensor& y) {
  KELVIN_CHECK_EQ(x.ndim(), 2) << "dropout.x must be [N, F], got " << x.ToString();
  CheckShape(y, x.shape(), "dropout.y");
  CheckDType(y, x.dtype(), "dropout.y");
  CheckShape(token_keys, {x.dim(0)}, "dropout.token_keys");
  CheckDType(token_keys, DType::kI64, "dropout.token_keys");
  KELVIN_CHECK_GE(feature_begin, 0) << "dropout: feature_begin " << feature_begin;
  CheckDevice(ctx, {&x, &token_keys, &y}, "HashedDropout");
  const uint64_t threshold = DropoutThreshold(p);
  const double scale = 1.0 / (1.0 - p);
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda())
    return cuda::HashedDropout(ctx, x, token_keys, site, feature_begin, threshold, scale, y);
#endif
  cpu::HashedDropout(x, token_keys, site, feature_begin, threshold, scale, y);
}

}  // namespace kelvin::ops
