// Naive GEMM reference (f64 triple loops on host tensors of any float dtype; tests only).
// M rows of C, N columns of C, K contracted.
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::Gemm: c [M, N] = alpha * op(a) @ op(b) + beta * c; beta = 0 never reads c.
void Gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha = 1.0, double beta = 0.0);

// Same contract as ops::GemmBackward, written as the plain sums
// d op(A)[i, k] = sum_j dC[i, j] op(B)[k, j] and d op(B)[k, j] = sum_i op(A)[i, k] dC[i, j].
void GemmBackward(const Tensor& dc, const Tensor& a, bool transpose_a, const Tensor& b,
                  bool transpose_b, Tensor* da, Tensor* db, bool accumulate_da, bool accumulate_db);

}  // namespace kelvin::reference
