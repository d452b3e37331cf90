// AdamW optimizer step over a flat chunk of n parameters, mirroring PyTorch's single-tensor
// torch.optim.AdamW (foreach=False): fp32 master weights, moments in the master's dtype, and an
// optional bf16/f32 copy of the updated weights for the forward pass. An optimizer is not
// differentiated: there is no backward. CPU: f32, f64 masters. CUDA: f32 masters.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.h"
#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

struct AdamWHyperParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// The step's scalars, computed in f64 on the host as PyTorch does, then applied in the master's
// dtype.
struct AdamWScalars {
  double decay;                  // 1 - lr * weight_decay
  double beta1_weight;           // 1 - beta1: the lerp weight of the gradient into exp_avg
  double beta2;                  // exp_avg_sq's decay
  double one_minus_beta2;        // 1 - beta2
  double bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  double eps;                    // added to the denominator
  double neg_step_size;          // -lr / (1 - beta1^step)
};
AdamWScalars ComputeAdamWScalars(const AdamWHyperParams& hp, int64_t step);

// One step (step >= 1 counts optimizer steps, this one included). master [n] (f32; f64 in tests)
// and grad, m (exp_avg), v (exp_avg_sq) [n] of the same dtype; model [n] optional (an undefined
// Tensor for none; f32, bf16 or the master's dtype) receives the updated master. Any shapes with
// n elements. Per element, in the master's dtype:
//   master *= 1 - lr * weight_decay
//   m = lerp(m, grad, 1 - beta1)
//   v = v * beta2 + (1 - beta2) * grad * grad
//   master += -step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
void AdamWStep(const Context& ctx, Tensor& master, const Tensor& grad, Tensor& m, Tensor& v,
               Tensor& model, const AdamWHyperParams& hp, int64_t step);

namespace internal {

// The step's scalars in T (the master's dtype), as PyTorch's kernels apply Python scalars.
template <typename T>
struct AdamWCoefficients {
  explicit AdamWCoefficients(const AdamWScalars& s)
      : decay(static_cast<T>(s.decay)),
        beta1_weight(static_cast<T>(s.beta1_weight)),
        beta2(static_cast<T>(s.beta2)),
        one_minus_beta2(static_cast<T>(s.one_minus_beta2)),
        bias_correction2_sqrt(static_cast<T>(s.bias_correction2_sqrt)),
        eps(static_cast<T>(s.eps)),
        neg_step_size(static_cast<T>(s.neg_step_size)) {}
  T decay, beta1_weight, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
};

// One element's update, shared by the CPU and CUDA kernels: updates m and v, returns the new
// parameter. lerp is ATen's: exact at both ends, switching formulas at weight 0.5.
template <typename T>
KELVIN_HOST_DEVICE inline T AdamWUpdate(T param, T grad, T& m, T& v,
                                        const AdamWCoefficients<T>& c) {
  param *= c.decay;
  const T w = c.beta1_weight;
  m = (w < T(0.5) && w > T(-0.5)) ? m + w * (grad - m) : grad - (grad - m) * (T(1) - w);
  v = v * c.beta2 + c.one_minus_beta2 * grad * grad;
  const T denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
  return param + c.neg_step_size * (m / denom);
}

}  // namespace internal

// Backends behind the dispatcher above (arguments already checked; model may be undefined).
namespace cpu {
void AdamWStep(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& model,
               const AdamWScalars& s);
}  // namespace cpu
namespace cuda {
void AdamWStep(const Context& ctx, Tensor& master, const Tensor& grad, Tensor& m, Tensor& v,
               Tensor& model, const AdamWScalars& s);
}  // namespace cuda

}  // namespace kelvin::ops
