// Naive RoPE reference (f64 arithmetic on host tensors; tests only).
#pragma once

#include "core/tensor.h"

namespace kelvin::reference {

// Same contract as ops::RopeForward / RopeBackward (x [N, H, d], positions [N] i32, inv_freq
// [d/2], cos and sin times attention_factor), written as the plain formulas. The angle position *
// inv_freq[i] is rounded to inv_freq's dtype, as the op computes it in that dtype (with f32, at
// position 131000 this rounding alone moves the angle by up to 4e-3 rad); everything after it is
// f64.
void RopeForward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y,
                 double attention_factor = 1.0);
void RopeBackward(const Tensor& dy, const Tensor& positions, const Tensor& inv_freq, Tensor& dx,
                  double attention_factor = 1.0);

}  // namespace kelvin::reference
