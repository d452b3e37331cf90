// Naive attention reference: materialises the masked score matrix of every (row, head) in f64.
#pragma once

#include "core/ops/attention.h"

namespace kelvin::reference {

void AttentionForward(const ops::AttentionShape& shape, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse);
void AttentionBackward(const ops::AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& dq,
                       Tensor& dk, Tensor& dv);

}  // namespace kelvin::reference
