// Naive attention reference: materialises the masked score matrix of every (row, head) in f64.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kelvin::reference {

// B rows of T tokens flattened to N = B*T, H query heads, G key/value heads (H divisible by G), d
// head dim. Token t of a row attends to s in [t - p_t, t], where p_t is its position id: ordinary
// causal attention when positions run 0..T-1, per-document attention when they restart (packing).
struct AttentionShape {
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
};

void AttentionForward(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse);
void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& dq,
                       Tensor& dk, Tensor& dv);

}  // namespace kelvin::reference
