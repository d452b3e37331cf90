// Elementwise ops over whole tensors of any shape (flat over numel, operands of one shape): Add,
// Scale, Axpy, Cast, Fill and the backward passes. CPU: f32, f64 (Cast and Fill also bf16, Fill
// also i32/i64). CUDA: f32, bf16 (bf16 computed in f32 and rounded once to nearest even).
// Outputs may alias inputs wherever noted: every element is read before it is written.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// out = a + b; a, b, out of one shape and dtype; out may be a or b.
void Add(const Context& ctx, const Tensor& a, const Tensor& b, Tensor& out);
// da = db = dout (written; the dtype and shape of dout).
void AddBackward(const Context& ctx, const Tensor& dout, Tensor& da, Tensor& db);

// out = alpha * x; out may be x.
void Scale(const Context& ctx, const Tensor& x, double alpha, Tensor& out);
// dx = alpha * dout (written); dx may be dout.
void ScaleBackward(const Context& ctx, const Tensor& dout, double alpha, Tensor& dx);

// y += alpha * x. x has y's dtype, or is bf16 with y f32 (gradient accumulation into f32).
void Axpy(const Context& ctx, double alpha, const Tensor& x, Tensor& y);

// out = x converted to out's dtype (f32, bf16, f64; f64 on the CPU only); to bf16 rounds to nearest
// even, from f64 directly (no double rounding through f32). Same dtypes copy; out may be x.
void Cast(const Context& ctx, const Tensor& x, Tensor& out);
// dx = dout converted to dx's dtype (written).
void CastBackward(const Context& ctx, const Tensor& dout, Tensor& dx);

// Every element of t = value (f32, bf16, f64, i32, i64; integer dtypes need an integral value).
void Fill(const Context& ctx, Tensor& t, double value);

// f64 -> bf16 rounded once to nearest even (Cast's rule; no double rounding through f32).
bf16 Bf16FromDouble(double value);

// Backends behind the dispatchers above (arguments already checked; every tensor contiguous, of
// `numel` elements).
namespace cpu {
#ifndef __CUDACC__  // OpenMP host code; nvcc compiles the .cu files without -fopenmp
// Every i in [0, n) through fn(i), threaded (above kParallelElements, where threads pay for
// themselves) and vectorised: the loop of the CPU elementwise kernels. Each thread takes its own
// copy of fn, so the pointers it captured stay in registers and the loop vectorises. The if clause
// names `parallel`: unqualified it would also switch off simd for small n.
inline constexpr int64_t kParallelElements = int64_t{1} << 15;
template <typename Fn>
void ForEachIndex(int64_t n, Fn fn) {
  const bool threaded = n >= kParallelElements;
#pragma omp parallel for simd schedule(static) firstprivate(fn) if (parallel : threaded)
  for (int64_t i = 0; i < n; ++i) fn(i);
}
#endif

void Add(const Tensor& a, const Tensor& b, Tensor& out);
void Scale(const Tensor& x, double alpha, Tensor& out);
void Axpy(double alpha, const Tensor& x, Tensor& y);
void Cast(const Tensor& x, Tensor& out);
void Fill(Tensor& t, double value);
}  // namespace cpu
namespace cuda {
void Add(const Context& ctx, const Tensor& a, const Tensor& b, Tensor& out);
void Scale(const Context& ctx, const Tensor& x, double alpha, Tensor& out);
void Axpy(const Context& ctx, double alpha, const Tensor& x, Tensor& y);
void Cast(const Context& ctx, const Tensor& x, Tensor& out);
void Fill(const Context& ctx, Tensor& t, double value);
}  // namespace cuda

}  // namespace kelvin::ops
