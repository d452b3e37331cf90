// LoRA forward and backward as four GEMMs each way.
#include "core/ops/lora.h"

#include "core/check.h"
#include "core/ops/gemm.h"

namespace kelvin::ops {

void LoraForward(const Context& ctx, const Tensor& x, const Tensor& a, const Tensor& b,
                 double scale, Tensor& z, Tensor& y) {
  KELVIN_CHECK(a.ndim() == 2 && b.ndim() == 2 && a.dim(0) == b.dim(1))
      << "LoRA: a [r, in] and b [out, r] disagree on the rank: " << a.ToString() << ", "
      << b.ToString();
  Gemm(ctx, x, false, a, true, z);                                   // z = x A^T
  Gemm(ctx, z, false, b, true, y, static_cast<float>(scale), 1.0f);  // y += s z B^T
}

void LoraBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& a,
                  const Tensor& b, const Tensor& z, double scale, Tensor& dz, Tensor& dx,
                  Tensor& da, Tensor& db) {
  const auto s = static_cast<float>(scale);
  Gemm(ctx, dy, false, b, false, dz, s);                            // dz = s dy B
  if (db.defined()) Gemm(ctx, dy, true, z, false, db, s, 1.0f);     // db += s dy^T z
  if (da.defined()) Gemm(ctx, dz, true, x, false, da, 1.0f, 1.0f);  // da += dz^T x
  Gemm(ctx, dz, false, a, false, dx, 1.0f, 1.0f);                   // dx += dz A
}

}  // namespace kelvin::ops
