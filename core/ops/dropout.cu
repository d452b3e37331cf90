// Hashed dropout's CUDA kernel: a grid-stride loop over the N * F elements, each one's mask hashed
// alone with the same DropoutKeeps as the CPU (so both draw the same mask), math in f32.
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/dropout.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::ToFloat;

constexpr int kThreads = 256;

template <typename T>
__global__ void DropoutKernel(int64_t n, int64_t features, const T* x, const int64_t* keys,
                              uint64_t site, int64_t feature_begin, uint64_t threshold, float scale,
                              T* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t row = i / features, f = i % features;
    const bool keep =
        DropoutKeeps(static_cast<uint64_t>(keys[row]), site, feature_begin + f, threshold);
    y[i] = FromFloat<T>(keep ? ToFloat(x[i]) * scale : 0.0f);
  }
}

}  // namespace

void HashedDropout(const Context& ctx, const Tensor& x, const Tensor& token_keys, uint64_t site,
                   int64_t feature_begin, uint64_t threshold, double scale, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchCudaFloat(x.dtype(), "HashedDropout", [&]<typename T>() {
    DropoutKernel<T><<<cuda_utils::GridFor(n, kThreads), kThreads, 0, StreamOf(ctx)>>>(
        n, x.dim(1), x.data<T>(), token_keys.data<int64_t>(), site, feature_begin, threshold,
        static_cast<float>(scale), y.data<T>());
  });
  KELVIN_CUDA_CHECK_LAUNCH();
}

}  // namespace kelvin::ops::cuda
