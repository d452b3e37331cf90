// Naive embedding reference (f64 arithmetic on host tensors of any float dtype; tests only).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::EmbeddingForward / EmbeddingBackward, written as plain loops.
void EmbeddingForward(const Tensor& ids, const Tensor& table, int64_t vocab_begin, Tensor& out);
void EmbeddingBackward(const Tensor& ids, const Tensor& dout, int64_t vocab_begin, Tensor& dtable);

}  // namespace kelvin::reference
