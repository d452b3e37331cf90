// Embedding CUDA kernels: one block per token, threads over the hidden columns. The backward adds
// into the f32 table gradient with atomicAdd (repeated ids sum in a run-dependent order).
// N tokens, V vocabulary rows held here, D hidden.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/embedding.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::ToFloat;
using internal::ShardRow;

constexpr int kThreads = 256;

// grid: N blocks.
template <typename T>
__global__ void ForwardKernel(const int32_t* ids, const T* table, int64_t vocab_begin, int64_t v,
                              int64_t d, T* out) {
  const int64_t t = blockIdx.x;
  const int64_t row = ShardRow(ids[t], vocab_begin, v);
  T* out_row = out + t * d;  // [D]
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    out_row[i] = row < 0 ? T(0.0f) : table[row * d + i];
  }
}

// grid: N blocks.
template <typename T>
__global__ void BackwardKernel(const int32_t* ids, const T* dout, int64_t vocab_begin, int64_t v,
                               int64_t d, float* dtable) {
  const int64_t t = blockIdx.x;
  const int64_t row = ShardRow(ids[t], vocab_begin, v);
  if (row < 0) return;
  const T* dout_row = dout + t * d;      // [D]
  float* dtable_row = dtable + row * d;  // [D]
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    atomicAdd(dtable_row + i, ToFloat(dout_row[i]));
}

}  // namespace

void EmbeddingForward(const Context& ctx, const Tensor& ids, const Tensor& table,
                      int64_t vocab_begin, Tensor& out) {
  const int64_t n = ids.dim(0);
  if (n == 0 || table.dim(1) == 0) return;
  DispatchCudaFloat(table.dtype(), "EmbeddingForward", [&]<typename T>() {
    ForwardKernel<T><<<static_cast<unsigned>(n), kThreads, 0, StreamOf(ctx)>>>(
        ids.data<int32_t>(), table.data<T>(), vocab_begin, table.dim(0), table.dim(1),
        out.data<T>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void EmbeddingBackward(const Context& ctx, const Tensor& ids, const Tensor& dout,
                       int64_t vocab_begin, Tensor& dtable) {
  const int64_t n = ids.dim(0);
  if (n == 0 || dtable.dim(1) == 0) return;
  DispatchCudaFloat(dout.dtype(), "EmbeddingBackward", [&]<typename T>() {
    BackwardKernel<T><<<static_cast<unsigned>(n), kThreads, 0, StreamOf(ctx)>>>(
        ids.data<int32_t>(), dout.data<T>(), vocab_begin, dtable.dim(0), dtable.dim(1),
        dtable.data<float>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kelvin::ops::cuda
