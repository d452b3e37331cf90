// GEMM (row-major): C[M, N] = alpha * op(A)[M, K] @ op(B)[K, N] + beta * C, op(X) = X or X^T,
// and its backward. M rows of C, N columns of C, K the contracted dimension.
// CPU (OpenBLAS): f32, f64, and bf16 inputs with a bf16 or f32 C (computed in f32).
// CUDA (cuBLASLt, f32 accumulation, true fp32 for f32 inputs): f32 inputs with an f32 C, and bf16
// inputs with a bf16 or f32 C.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// a [M, K] ([K, M] when transpose_a), b [K, N] ([N, K] when transpose_b), c [M, N]; a and b share
// one dtype. beta = 1 accumulates into c (gradient accumulation); beta = 0 never reads c, so
// whatever c held (even NaN) cannot leak into the result. c must not overlap a or b.
void Gemm(const Context& ctx, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
          Tensor& c, float alpha = 1.0f, float beta = 0.0f);

// Backward of C = op(A) @ op(B): given dc [M, N] (dtype of a and b), writes dA into *da (a's
// shape) and dB into *db (b's shape), or adds into them with accumulate_da / accumulate_db; pass
// nullptr or an undefined tensor (a frozen weight's gradient) to skip one. da and db may be of any
// output dtype Gemm accepts for these inputs.
void GemmBackward(const Context& ctx, const Tensor& dc, const Tensor& a, bool transpose_a,
                  const Tensor& b, bool transpose_b, Tensor* da, Tensor* db, bool accumulate_da,
                  bool accumulate_db);

// Backends behind Gemm (arguments already checked; M, N, K > 0).
namespace cpu {
void Gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          float alpha, float beta);
// c = beta * c, where beta = 0 writes zeros without reading c (the K = 0 product).
void ScaleOutput(Tensor& c, float beta);
}  // namespace cpu
namespace cuda {
void Gemm(const Context& ctx, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
          Tensor& c, float alpha, float beta);
void ScaleOutput(const Context& ctx, Tensor& c, float beta);
}  // namespace cuda

}  // namespace kelvin::ops
