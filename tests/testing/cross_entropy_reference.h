// The f64 reference of the LM loss for tests of its implementations: the summed cross-entropy of
// logits [N, V] (any float dtype) against labels [N] and the gradient of grad_scale times it.
#pragma once

#include "core/tensor.h"

namespace kelvin::testing {

struct CrossEntropyReference {
  double sum = 0;   // over the tokens (ignored labels add 0)
  Tensor gradient;  // [N, V] f64 host
};
CrossEntropyReference ReferenceCrossEntropy(const Tensor& logits, const Tensor& labels,
                                            double grad_scale);

}  // namespace kelvin::testing
