// Plain attention: argument checks and dispatch.
#include "core/ops/attention.h"

#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

void CheckArguments(const Context& ctx, const AttentionShape& shape, const Tensor& q,
                    const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& lse) {
  KELVIN_CHECK(!ctx.is_cuda())
      << "plain attention has no CUDA kernel: on CUDA, Llama attention runs through the fused SSA "
         "operator (ssa/), which covers attention without temperatures";
  KELVIN_CHECK_EQ(q.ndim(), 3) << "attention.q must be [N, H, d], got " << q.ToString();
  const int64_t n = q.dim(0), h = q.dim(1), d = q.dim(2);
  KELVIN_CHECK_EQ(n, shape.batch * shape.seq) << "attention.q rows vs batch x seq";
  KELVIN_CHECK_EQ(k.ndim(), 3) << "attention.k must be [N, G, d], got " << k.ToString();
  const int64_t g = k.dim(1);
  KELVIN_CHECK(g > 0 && h % g == 0)
      << "attention: " << h << " query heads are not a multiple of " << g << " kv heads";
  CheckShape(k, {n, g, d}, "attention.k");
  CheckShape(v, {n, g, d}, "attention.v");
  CheckShape(positions, {n}, "attention.positions");
  CheckDType(positions, DType::kI32, "attention.positions");
  CheckShape(lse, {n, h}, "attention.lse");
  CheckDType(lse, AccumDType(q.dtype()), "attention.lse");
  CheckDType(k, q.dtype(), "attention.k");
  CheckDType(v, q.dtype(), "attention.v");
  CheckDevice(ctx, {&q, &k, &v, &positions, &lse}, "Attention");
  // Kernels index keys [t - p_t, t]: positions must count up from 0 within each document.
  const int32_t* p = positions.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = i % shape.seq;
    KELVIN_CHECK(p[i] == 0 || (t > 0 && p[i] == p[i - 1] + 1))
        << "attention.positions[" << i << "] = " << p[i] << " after " << (t > 0 ? p[i - 1] : -1)
        << ": position ids must restart at 0 or count up by one within a row";
  }
}

}  // namespace

void AttentionForward(const Context& ctx, const AttentionShape& shape, const Tensor& q,
                      const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& out,
                      Tensor& lse) {
  CheckArguments(ctx, shape, q, k, v, positions, lse);
  CheckShape(out, q.shape(), "attention.out");
  CheckDType(out, q.dtype(), "attention.out");
  cpu::AttentionForward(shape, q, k, v, positions, out, lse);
}

void AttentionBackward(const Context& ctx, const AttentionShape& shape, const Tensor& dout,
                       const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                       const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) {
  CheckArguments(ctx, shape, q, k, v, positions, lse);
  const std::pair<const Tensor*, const char*> like_q[] = {
      {&dout, "attention.dout"}, {&out, "attention.out"}, {&dq, "attention.dq"}};
  for (const auto& [t, name] : like_q) {
    CheckShape(*t, q.shape(), name);
    CheckDType(*t, q.dtype(), name);
  }
  const std::pair<const Tensor*, const char*> like_k[] = {{&dk, "attention.dk"},
                                                          {&dv, "attention.dv"}};
  for (const auto& [t, name] : like_k) {
    CheckShape(*t, k.shape(), name);
    CheckDType(*t, q.dtype(), name);
  }
  cpu::AttentionBackward(shape, dout, q, k, v, positions, out, lse, dq, dk, dv);
}

}  // namespace kelvin::ops
