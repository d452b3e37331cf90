// Elementwise ops: argument checks and dispatch to the CPU or CUDA kernels.
#include "core/ops/elementwise.h"

#include <cmath>
#include <cstring>

#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

// `t` has `like`'s shape and dtype (`name` is e.g. "add.out").
void CheckLike(const Tensor& t, const Tensor& like, std::string_view name) {
  CheckShape(t, like.shape(), name);
  CheckDType(t, like.dtype(), name);
}

void CheckFloating(const Tensor& t, std::string_view name) {
  KELVIN_CHECK(IsFloating(t.dtype()))
      << name << " is " << t.ToString() << ", expected a floating dtype (f32, bf16, f64)";
}

void DispatchAdd([[maybe_unused]] const Context& ctx, const Tensor& a, const Tensor& b,
                 Tensor& out) {
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Add(ctx, a, b, out);
#endif
  cpu::Add(a, b, out);
}

void DispatchScale([[maybe_unused]] const Context& ctx, const Tensor& x, double alpha,
                   Tensor& out) {
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Scale(ctx, x, alpha, out);
#endif
  cpu::Scale(x, alpha, out);
}

void DispatchCast([[maybe_unused]] const Context& ctx, const Tensor& x, Tensor& out) {
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Cast(ctx, x, out);
#endif
  cpu::Cast(x, out);
}

}  // namespace

// Rounding first to f32 "to odd" (toward zero, then the last bit set when inexact) keeps what the
// second rounding needs, as f32 has more than 2 bits beyond bf16's 8; a plain f32 round would
// turn values just above a bf16 tie into ties.
bf16 Bf16FromDouble(double value) {
  const float nearest = static_cast<float>(value);
  if (std::isnan(value) || static_cast<double>(nearest) == value) return bf16(nearest);
  uint32_t bits;
  std::memcpy(&bits, &nearest, sizeof(bits));
  if (std::abs(static_cast<double>(nearest)) > std::abs(value)) --bits;  // toward zero (inf too)
  bits |= 1u;
  float odd;
  std::memcpy(&odd, &bits, sizeof(odd));
  return bf16(odd);
}

void Add(const Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  CheckFloating(a, "add.a");
  CheckLike(b, a, "add.b");
  CheckLike(out, a, "add.out");
  CheckDevice(ctx, {&a, &b, &out}, "Add");
  DispatchAdd(ctx, a, b, out);
}

void AddBackward(const Context& ctx, const Tensor& dout, Tensor& da, Tensor& db) {
  CheckFloating(dout, "add_backward.dout");
  CheckLike(da, dout, "add_backward.da");
  CheckLike(db, dout, "add_backward.db");
  CheckDevice(ctx, {&dout, &da, &db}, "AddBackward");
  DispatchCast(ctx, dout, da);
  DispatchCast(ctx, dout, db);
}

void Scale(const Context& ctx, const Tensor& x, double alpha, Tensor& out) {
  CheckFloating(x, "scale.x");
  CheckLike(out, x, "scale.out");
  CheckDevice(ctx, {&x, &out}, "Scale");
  DispatchScale(ctx, x, alpha, out);
}

void ScaleBackward(const Context& ctx, const Tensor& dout, double alpha, Tensor& dx) {
  CheckFloating(dout, "scale_backward.dout");
  CheckLike(dx, dout, "scale_backward.dx");
  CheckDevice(ctx, {&dout, &dx}, "ScaleBackward");
  DispatchScale(ctx, dout, alpha, dx);
}

void Axpy(const Context& ctx, double alpha, const Tensor& x, Tensor& y) {
  CheckFloating(y, "axpy.y");
  CheckShape(x, y.shape(), "axpy.x");
  KELVIN_CHECK(x.dtype() == y.dtype() || (x.dtype() == DType::kBF16 && y.dtype() == DType::kF32))
      << "axpy.x is " << x.ToString() << " and axpy.y is " << y.ToString()
      << ": x must have y's dtype, or be bf16 with y f32";
  CheckDevice(ctx, {&x, &y}, "Axpy");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Axpy(ctx, alpha, x, y);
#endif
  cpu::Axpy(alpha, x, y);
}

void Cast(const Context& ctx, const Tensor& x, Tensor& out) {
  CheckFloating(x, "cast.x");
  CheckFloating(out, "cast.out");
  CheckShape(out, x.shape(), "cast.out");
  CheckDevice(ctx, {&x, &out}, "Cast");
  DispatchCast(ctx, x, out);
}

void CastBackward(const Context& ctx, const Tensor& dout, Tensor& dx) {
  CheckFloating(dout, "cast_backward.dout");
  CheckFloating(dx, "cast_backward.dx");
  CheckShape(dx, dout.shape(), "cast_backward.dx");
  CheckDevice(ctx, {&dout, &dx}, "CastBackward");
  DispatchCast(ctx, dout, dx);
}

void Fill(const Context& ctx, Tensor& t, double value) {
  KELVIN_CHECK(t.defined()) << "fill.t is undefined";
  if (t.dtype() == DType::kI32 || t.dtype() == DType::kI64) {
    // Integral values in [-2^(bits-1), 2^(bits-1)): both bounds are exact doubles.
    const double bound = t.dtype() == DType::kI32 ? 0x1p31 : 0x1p63;
    KELVIN_CHECK(std::trunc(value) == value && value >= -bound && value < bound)
        << "Fill of " << t.ToString() << " with " << value
        << ": integer tensors take an integral value in their dtype's range";
  }
  CheckDevice(ctx, {&t}, "Fill");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Fill(ctx, t, value);
#endif
  cpu::Fill(t, value);
}

}  // namespace kelvin::ops
