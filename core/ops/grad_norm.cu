// Sum of squares on CUDA: per tensor, a fixed grid of blocks each writes one f64 partial sum into a
// shared partials buffer (f64 as on the CPU: an f32 sum overflows to inf for norms above ~1.8e19,
// and the clip would then zero every gradient); one copy brings every partial to the host, where
// they are added in order (deterministic for a given set of shapes).
#include <algorithm>
#include <vector>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/grad_norm.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::ToFloat;

constexpr int kThreads = 256;
constexpr int64_t kMinElementsPerThread = 8;
constexpr int64_t kMaxBlocksPerTensor = 1024;

int64_t BlocksFor(int64_t n) {
  return std::min(cuda_utils::CeilDiv(n, kThreads * kMinElementsPerThread), kMaxBlocksPerTensor);
}

// x [n] -> partial[blockIdx.x] = sum of x_i^2 over the block's grid-stride share.
template <typename T>
__global__ void PartialSumOfSquaresKernel(const T* x, int64_t n, double* partial) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double sum = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const double v = ToFloat(x[i]);
    sum += v * v;
  }
  sum = cuda_utils::BlockReduceSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

}  // namespace

double SumOfSquares(const Context& ctx, const std::vector<Tensor>& tensors) {
  int64_t total_blocks = 0;
  for (const Tensor& t : tensors) total_blocks += BlocksFor(t.numel());
  if (total_blocks == 0) return 0.0;
  Tensor partial = Tensor::Empty({total_blocks}, DType::kF64, ctx.device());  // [total_blocks]
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const int64_t blocks = BlocksFor(t.numel());
    if (blocks == 0) continue;
    DispatchCudaFloat(t.dtype(), "SumOfSquares", [&]<typename T>() {
      PartialSumOfSquaresKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, StreamOf(ctx)>>>(
          t.data<T>(), t.numel(), partial.data<double>() + offset);
      KELVIN_CUDA_CHECK_LAUNCH();
    });
    offset += blocks;
  }
  const Tensor host = CopyToDevice(ctx, partial, Device::Cpu());  // [total_blocks]
  double total = 0;
  for (int64_t i = 0; i < total_blocks; ++i) total += host.data<double>()[i];
  return total;
}

}  // namespace kelvin::ops::cuda
