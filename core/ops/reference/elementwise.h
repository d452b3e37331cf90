// Naive elementwise references (f64 arithmetic on host tensors of any float dtype; tests only).
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// Same contracts as the ops in core/ops/elementwise.h, written as the plain formulas.
void Add(const Tensor& a, const Tensor& b, Tensor& out);
void AddBackward(const Tensor& dout, Tensor& da, Tensor& db);
void Scale(const Tensor& x, double alpha, Tensor& out);
void ScaleBackward(const Tensor& dout, double alpha, Tensor& dx);
void Axpy(double alpha, const Tensor& x, Tensor& y);
// To bf16: the nearest bf16 value, ties to the even significand, found by scaling to bf16's unit in
// the last place and rounding there; other dtypes: the nearest value (the C++ conversion).
void Cast(const Tensor& x, Tensor& out);
void CastBackward(const Tensor& dout, Tensor& dx);

}  // namespace kelvin::reference
