// Naive SwiGLU reference (f64 arithmetic on host tensors of any float dtype; tests only).
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::SwiGluForward / SwiGluBackward (N rows, F features), written as the plain
// formulas.
void SwiGluForward(const Tensor& gate, const Tensor& up, Tensor& out);
void SwiGluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate,
                    Tensor& dup);

}  // namespace kelvin::reference
