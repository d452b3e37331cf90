// GEMM's one CUDA kernel: C = beta * C for the empty product (K = 0), where beta = 0 writes zeros
// without reading C. The matmul itself is cuBLASLt's (core/cuda/gemm_cublaslt.cc).
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/gemm.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::ToFloat;

constexpr int kThreads = 256;

// c [count] = beta * c, grid-stride.
template <typename T>
__global__ void ScaleKernel(T* c, int64_t count, float beta) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    c[i] = FromFloat<T>(beta == 0.0f ? 0.0f : beta * ToFloat(c[i]));
  }
}

}  // namespace

void ScaleOutput(const Context& ctx, Tensor& c, float beta) {
  const int64_t count = c.numel();
  DispatchCudaFloat(c.dtype(), "Gemm (K = 0)", [&]<typename T>() {
    ScaleKernel<T><<<cuda_utils::GridFor(count, kThreads), kThreads, 0, StreamOf(ctx)>>>(
        c.data<T>(), count, beta);
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kelvin::ops::cuda
