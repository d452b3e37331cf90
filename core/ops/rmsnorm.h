// RMSNorm over the last dimension (Llama): y = x / sqrt(mean(x^2) + eps) * weight.
// N rows, D features. CPU: f32, f64. CUDA: f32, bf16 (statistics in f32; for bf16 the normalised
// value is rounded to bf16 before the weight multiply, as Hugging Face's LlamaRMSNorm does).
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// x [N, D], weight [D] (dtype of x) -> y [N, D] (dtype of x), rstd [N] (AccumDType) saved for
// backward.
void RmsNormForward(const Context& ctx, const Tensor& x, const Tensor& weight, double eps,
                    Tensor& y, Tensor& rstd);

// dy [N, D], x [N, D], weight [D], rstd [N] -> dx [N, D] (written), dweight [D] (AccumDType,
// accumulated +=; an undefined dweight, a frozen weight's, is computed into a discarded scratch).
void RmsNormBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                     const Tensor& rstd, Tensor& dx, Tensor& dweight);

// Backends behind the dispatchers above (arguments already checked).
namespace cpu {
void RmsNormForward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                     Tensor& dx, Tensor& dweight);
}  // namespace cpu
namespace cuda {
void RmsNormForward(const Context& ctx, const Tensor& x, const Tensor& weight, double eps,
                    Tensor& y, Tensor& rstd);
void RmsNormBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                     const Tensor& rstd, Tensor& dx, Tensor& dweight);
}  // namespace cuda

}  // namespace kelvin::ops
