// SwiGLU: argument checks and dispatch to the CPU or CUDA kernel.
#include "core/ops/swiglu.h"

#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

// `t` has `gate`'s shape [N, F] and dtype (`name` is e.g. "swiglu.up").
void CheckLikeGate(const Tensor& t, const Tensor& gate, std::string_view name) {
  CheckShape(t, gate.shape(), name);
  CheckDType(t, gate.dtype(), name);
}

void CheckInputs(const Context& ctx, const Tensor& gate, const Tensor& up) {
  KELVIN_CHECK_EQ(gate.ndim(), 2) << "swiglu.gate must be [N, F], got " << gate.ToString();
  CheckLikeGate(up, gate, "swiglu.up");
  CheckDevice(ctx, {&gate, &up}, "SwiGlu");
}

}  // namespace

void SwiGluForward(const Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  CheckInputs(ctx, gate, up);
  CheckLikeGate(out, gate, "swiglu.out");
  CheckDevice(ctx, {&out}, "SwiGluForward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::SwiGluForward(ctx, gate, up, out);
#endif
  cpu::SwiGluForward(gate, up, out);
}

void SwiGluBackward(const Context& ctx, const Tensor& dout, const Tensor& gate, const Tensor& up,
                    Tensor& dgate, Tensor& dup) {
  CheckInputs(ctx, gate, up);
  CheckLikeGate(dout, gate, "swiglu.dout");
  CheckLikeGate(dgate, gate, "swiglu.dgate");
  CheckLikeGate(dup, gate, "swiglu.dup");
  KELVIN_CHECK(!(dgate.SameStorage(dup) && dgate.raw_data() == dup.raw_data()))
      << "SwiGluBackward: dgate and dup are the same tensor " << dgate.ToString();
  CheckDevice(ctx, {&dout, &dgate, &dup}, "SwiGluBackward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::SwiGluBackward(ctx, dout, gate, up, dgate, dup);
#endif
  cpu::SwiGluBackward(dout, gate, up, dgate, dup);
}

}  // namespace kelvin::ops
