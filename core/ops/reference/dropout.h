// Naive hashed dropout (f64 arithmetic on host tensors; tests only).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::HashedDropout, the keep test written as u >= p with u the element's hash's
// top 53 bits over 2^53.
void HashedDropout(const Tensor& x, const Tensor& token_keys, uint64_t site, int64_t feature_begin,
                   double p, Tensor& y);

}  // namespace kelvin::reference
