// Host tensors as flat vectors of double and back: the naive reference ops compute in f64 on these.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace kelvin::reference {

// Every element of a host tensor (any dtype) as a double.
std::vector<double> ToDoubles(const Tensor& t);
// Writes values into a host tensor of any dtype (floats rounded to nearest even, ints truncated).
void FromDoubles(const std::vector<double>& values, Tensor& t);

}  // namespace kelvin::reference
