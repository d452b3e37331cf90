// Cross-entropy CUDA kernels: one block per row. Each thread keeps an online (max, sum-exp) over
// its strided share of the row in f32, the block merges them into the row's log-sum-exp, and the
// fused kernel then rewrites the row (still in L2) with its gradient. Targets outside [0, V) are
// treated as ignored (a kernel cannot abort). N tokens, V vocabulary.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/cross_entropy.h"
#include "core/ops/dispatch.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::ToFloat;

constexpr int kThreads = 512;

__device__ __forceinline__ bool IsCounted(int32_t target, int64_t v) {
  return target >= 0 && target < v;
}

// log(sum_i exp(x_i)) of one row x [V]; every thread of the block gets it. Contains __syncthreads,
// so reads of x made before the call are complete when any thread returns.
template <typename T>
__device__ float BlockLogSumExp(const T* x, int64_t v) {
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float xi = ToFloat(x[i]);
    if (xi > running_max) {
      running_sum = running_sum * expf(running_max - xi) + 1.0f;
      running_max = xi;
    } else {
      running_sum += expf(xi - running_max);
    }
  }
  const float block_max = cuda_utils::BlockReduceMax(running_max);
  const float rescaled = running_sum > 0.0f ? running_sum * expf(running_max - block_max) : 0.0f;
  return block_max + logf(cuda_utils::BlockReduceSum(rescaled));
}

// x [V] <- scale * (exp(x - lse) - onehot(target)), or zeros for an ignored row.
template <typename T>
__device__ void WriteRowGradient(T* x, int64_t v, int32_t target, float lse, float scale) {
  const bool counted = IsCounted(target, v);
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float onehot = i == target ? 1.0f : 0.0f;
    x[i] = FromFloat<T>(counted ? scale * (expf(ToFloat(x[i]) - lse) - onehot) : 0.0f);
  }
}

// The logit of the target (0 for an ignored row); read by thread 0 only.
template <typename T>
__device__ float TargetLogit(const T* x, int64_t v, int32_t target) {
  return threadIdx.x == 0 && IsCounted(target, v) ? ToFloat(x[target]) : 0.0f;
}

// grid: N blocks.
template <typename T>
__global__ void ForwardKernel(const T* logits, const int32_t* targets, int64_t v, float* loss,
                              float* lse) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;  // [V]
  const int32_t target = targets[row];
  const float row_lse = BlockLogSumExp(x, v);
  if (threadIdx.x == 0) {
    lse[row] = row_lse;
    loss[row] = IsCounted(target, v) ? row_lse - TargetLogit(x, v, target) : 0.0f;
  }
}

// grid: N blocks.
template <typename T>
__global__ void BackwardKernel(T* logits, const int32_t* targets, const float* lse, int64_t v,
                               float scale) {
  const int64_t row = blockIdx.x;
  WriteRowGradient(logits + row * v, v, targets[row], lse[row], scale);
}

// grid: N blocks.
template <typename T>
__global__ void FusedKernel(T* logits, const int32_t* targets, int64_t v, float scale,
                            float* loss) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * v;  // [V]
  const int32_t target = targets[row];
  // Read before BlockLogSumExp's barriers: after them other threads overwrite the row.
  const float target_logit = TargetLogit(x, v, target);
  const float row_lse = BlockLogSumExp(x, v);
  if (threadIdx.x == 0) loss[row] = IsCounted(target, v) ? row_lse - target_logit : 0.0f;
  WriteRowGradient(x, v, target, row_lse, scale);
}

}  // namespace

void CrossEntropyForward(const Context& ctx, const Tensor& logits, const Tensor& targets,
                         Tensor& loss, Tensor& lse) {
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  DispatchCudaFloat(logits.dtype(), "CrossEntropyForward", [&]<typename T>() {
    ForwardKernel<T><<<static_cast<unsigned>(n), kThreads, 0, StreamOf(ctx)>>>(
        logits.data<T>(), targets.data<int32_t>(), logits.dim(1), loss.data<float>(),
        lse.data<float>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void CrossEntropyBackward(const Context& ctx, Tensor& logits, const Tensor& targets,
                          const Tensor& lse, double grad_scale) {
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  DispatchCudaFloat(logits.dtype(), "CrossEntropyBackward", [&]<typename T>() {
    BackwardKernel<T><<<static_cast<unsigned>(n), kThreads, 0, StreamOf(ctx)>>>(
        logits.data<T>(), targets.data<int32_t>(), lse.data<float>(), logits.dim(1),
        static_cast<float>(grad_scale));
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void SoftmaxCrossEntropy(const Context& ctx, Tensor& logits, const Tensor& targets,
                         double grad_scale, Tensor& loss) {
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  DispatchCudaFloat(logits.dtype(), "SoftmaxCrossEntropy", [&]<typename T>() {
    FusedKernel<T><<<static_cast<unsigned>(n), kThreads, 0, StreamOf(ctx)>>>(
        logits.data<T>(), targets.data<int32_t>(), logits.dim(1), static_cast<float>(grad_scale),
        loss.data<float>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kelvin::ops::cuda
