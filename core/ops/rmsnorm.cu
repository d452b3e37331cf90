// RMSNorm CUDA kernels: one block per row for y and dx (f32 statistics); dweight through
// per-chunk partial sums [chunks, D] reduced in a fixed order (deterministic).
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/rmsnorm.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::RoundTo;
using cuda_utils::ToFloat;

constexpr int kThreads = 256;
constexpr int64_t kRowsPerChunk = 64;  // preferred; more when the rows need > 65535 chunks

template <typename T>
__global__ void ForwardKernel(const T* x, const T* w, float eps, int64_t d, T* y, float* rstd) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;  // [D]
  T* yr = y + row * d;        // [D]
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = ToFloat(xr[i]);
    sum_sq += v * v;
  }
  sum_sq = cuda_utils::BlockReduceSum(sum_sq);
  const float r = rsqrtf(sum_sq / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    yr[i] = FromFloat<T>(RoundTo<T>(ToFloat(xr[i]) * r) * ToFloat(w[i]));
  }
}

template <typename T>
__global__ void BackwardInputKernel(const T* dy, const T* x, const T* w, const float* rstd,
                                    int64_t d, T* dx) {
  const int64_t row = blockIdx.x;
  const T* dyr = dy + row * d;
  const T* xr = x + row * d;
  T* dxr = dx + row * d;
  const float r = rstd[row];
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    dot += ToFloat(dyr[i]) * ToFloat(w[i]) * ToFloat(xr[i]);
  }
  dot = cuda_utils::BlockReduceSum(dot);
  const float coeff = r * r * r * dot / static_cast<float>(d);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    dxr[i] = FromFloat<T>(r * ToFloat(dyr[i]) * ToFloat(w[i]) - coeff * ToFloat(xr[i]));
  }
}

// partial[chunk, i] = sum over the chunk's rows_per_chunk rows of dy * x * r.
// grid: (ceil(D/256), chunks)
template <typename T>
__global__ void WeightPartialKernel(const T* dy, const T* x, const float* rstd, int64_t n,
                                    int64_t d, int64_t rows_per_chunk, float* partial) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = min(n, begin + rows_per_chunk);
  float acc = 0.0f;
  for (int64_t row = begin; row < end; ++row) {
    acc += ToFloat(dy[row * d + i]) * ToFloat(x[row * d + i]) * rstd[row];
  }
  partial[blockIdx.y * d + i] = acc;
}

__global__ void WeightReduceKernel(const float* partial, int64_t chunks, int64_t d, float* dw) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  float acc = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) acc += partial[c * d + i];
  dw[i] += acc;
}

}  // namespace

void RmsNormForward(const Context& ctx, const Tensor& x, const Tensor& weight, double eps,
                    Tensor& y, Tensor& rstd) {
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0) return;
  DispatchCudaFloat(x.dtype(), "RmsNormForward", [&]<typename T>() {
    ForwardKernel<T><<<static_cast<unsigned>(n), kThreads, 0, StreamOf(ctx)>>>(
        x.data<T>(), weight.data<T>(), static_cast<float>(eps), d, y.data<T>(), rstd.data<float>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void RmsNormBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                     const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0) return;
  const int64_t rows_per_chunk = cuda_utils::RowsPerGridY(n, kRowsPerChunk);
  const int64_t chunks = cuda_utils::CeilDiv(n, rows_per_chunk);
  Tensor partial = Tensor::Empty({chunks, d}, DType::kF32, ctx.device());  // [chunks, D]
  cudaStream_t stream = StreamOf(ctx);
  DispatchCudaFloat(x.dtype(), "RmsNormBackward", [&]<typename T>() {
    BackwardInputKernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        dy.data<T>(), x.data<T>(), weight.data<T>(), rstd.data<float>(), d, dx.data<T>());
    KELVIN_CUDA_CHECK_LAUNCH();
    const dim3 grid(static_cast<unsigned>(cuda_utils::CeilDiv(d, kThreads)),
                    static_cast<unsigned>(chunks));
    WeightPartialKernel<T><<<grid, kThreads, 0, stream>>>(
        dy.data<T>(), x.data<T>(), rstd.data<float>(), n, d, rows_per_chunk, partial.data<float>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
  WeightReduceKernel<<<static_cast<unsigned>(cuda_utils::CeilDiv(d, kThreads)), kThreads, 0,
                       stream>>>(partial.data<float>(), chunks, d, dweight.data<float>());
  KELVIN_CUDA_CHECK_LAUNCH();
  // `partial` returns to the cache when this function ends; the cache hands it out again only to
  // work on this same stream, which runs after the kernels above.
}

}  // namespace kelvin::ops::cuda
