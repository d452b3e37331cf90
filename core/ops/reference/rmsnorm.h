// Naive RMSNorm reference (f64 arithmetic on host tensors of any float dtype; tests only).
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::RmsNormForward / RmsNormBackward, written as the plain formulas.
void RmsNormForward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                     Tensor& dx, Tensor& dweight);

}  // namespace kelvin::reference
