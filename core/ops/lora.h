// LoRA's low-rank update beside a linear layer y = x W^T (Hu et al., 2021): y += s (x A^T) B^T,
// and its backward, both as GEMMs (ops::Gemm: OpenBLAS on the CPU, cuBLASLt on CUDA), so the op
// needs no kernel of its own. N rows, in / out the layer's features, r the rank, s the scale.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// x [N, in], a [r, in], b [out, r] (one dtype) -> z [N, r] = x A^T (written; kept for the
// backward), y [N, out] += scale * z B^T.
void LoraForward(const Context& ctx, const Tensor& x, const Tensor& a, const Tensor& b,
                 double scale, Tensor& z, Tensor& y);

// From dy [N, out] and the forward's x and z: dz [N, r] = scale * dy B (scratch, written);
// db [out, r] += scale * dy^T z; da [r, in] += dz^T x; dx [N, in] += dz A. An undefined da or db
// (frozen adapters) is skipped; da and db may be the AccumDType of x.
void LoraBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& a,
                  const Tensor& b, const Tensor& z, double scale, Tensor& dz, Tensor& dx,
                  Tensor& da, Tensor& db);

}  // namespace kelvin::ops
