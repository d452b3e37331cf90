// Naive AdamW reference (f64 arithmetic on host tensors; tests only).
#pragma once

#include <cstdint>

#include "core/ops/adamw.h"
#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::AdamWStep, written as torch.optim.AdamW's single-tensor step in f64.
void AdamWStep(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& model,
               const ops::AdamWHyperParams& hp, int64_t step);

}  // namespace kelvin::reference
