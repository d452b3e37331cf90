// Global gradient L2 norm and clipping by it (PyTorch's clip_grad_norm_ on one rank; the parallel
// layer all-reduces the sums of squares across ranks before the sqrt). Not differentiated: there is
// no backward. CPU: f32, bf16, f64, summed in f64 over fixed blocks (bit-identical for any thread
// count). CUDA: f32, bf16, summed in f64 within each block and over the blocks on the host.
#pragma once

#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// sum_i x_i^2 of x (any shape) as a host double; synchronises CUDA.
double SumOfSquares(const Context& ctx, const Tensor& x);
// The same summed over several tensors (one synchronisation for all of them on CUDA).
double SumOfSquares(const Context& ctx, const std::vector<Tensor>& tensors);

// sqrt of SumOfSquares over the tensors.
double GlobalL2Norm(const Context& ctx, const std::vector<Tensor>& tensors);

// PyTorch's clamped clip coefficient: min(max_norm / (total_norm + 1e-6), 1). NaN stays NaN; an
// infinite norm gives 0.
double ClipCoefficient(double total_norm, double max_norm);

// Computes the global norm, multiplies every tensor in place by ClipCoefficient(norm, max_norm)
// when that is < 1 (a NaN norm changes nothing: the caller sees it in the returned value and
// should skip the step), and returns the pre-clip norm. max_norm > 0. Scaling goes through
// ops::Scale: CPU f32, f64; CUDA f32, bf16.
double ClipByGlobalNorm(const Context& ctx, std::vector<Tensor>& tensors, double max_norm);

// Backends behind the dispatchers above (arguments already checked).
namespace cpu {
double SumOfSquares(const std::vector<Tensor>& tensors);
}  // namespace cpu
namespace cuda {
double SumOfSquares(const Context& ctx, const std::vector<Tensor>& tensors);
}  // namespace cuda

}  // namespace kelvin::ops
