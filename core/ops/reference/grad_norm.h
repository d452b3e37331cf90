// Naive sum of squares reference (f64 over host tensors of any float dtype; tests only).
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// sum_i x_i^2 in f64, one element after another.
double SumOfSquares(const Tensor& x);

}  // namespace kelvin::reference
