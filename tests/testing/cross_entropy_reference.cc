// The naive f64 cross-entropy of core/ops/reference, summed in token order.
#include "tests/testing/cross_entropy_reference.h"

#include "core/ops/reference/cross_entropy.h"
#include "core/ops/reference/values.h"
#include "tests/testing/tensors.h"

namespace kelvin::testing {

CrossEntropyReference ReferenceCrossEntropy(const Tensor& logits, const Tensor& labels,
                                            double grad_scale) {
  const int64_t n = logits.dim(0);
  Tensor loss = Tensor::Empty({n}, DType::kF64), lse = Tensor::Empty({n}, DType::kF64);
  reference::CrossEntropyForward(Cast(logits, DType::kF64), labels, loss, lse);
  CrossEntropyReference result;
  result.gradient = Cast(logits, DType::kF64);
  reference::CrossEntropyBackward(result.gradient, labels, lse, grad_scale);
  for (const double l : reference::ToDoubles(loss)) result.sum += l;
  return result;
}

}  // namespace kelvin::testing
