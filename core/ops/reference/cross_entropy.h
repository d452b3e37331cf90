// Naive softmax cross-entropy reference (f64 arithmetic on host tensors; tests only).
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// Same contracts as ops::CrossEntropyForward / CrossEntropyBackward, with the log-sum-exp taken
// directly over the whole row (max first, then the sum).
void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse);
void CrossEntropyBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                          double grad_scale);

}  // namespace kelvin::reference
