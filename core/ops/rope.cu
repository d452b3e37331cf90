// RoPE CUDA kernel: one block per token. The block first puts the token's cos and sin [d/2] in
// shared memory (f32 angle, accurate sincosf, rounded to the activation dtype), then its threads
// rotate the H * d/2 pairs of the token's heads (consecutive threads, consecutive pairs).
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/rope.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::RoundTo;
using cuda_utils::ToFloat;

constexpr int kThreads = 256;

// grid: N blocks; dynamic shared memory: 2 * d/2 floats. sign = +1 forward, -1 backward; cos and
// sin times `factor` (the scaling's attention factor) before rounding. y may be x: each pair is
// read by the thread that writes it.
template <typename T>
__global__ void RotateKernel(const T* x, const int32_t* positions, const float* inv_freq,
                             int64_t heads, int64_t d, float sign, float factor, T* y) {
  extern __shared__ float table[];  // [2, d/2]: cos, then sign * sin
  const int64_t half = d / 2;
  const int64_t token = blockIdx.x;
  const float position = static_cast<float>(positions[token]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float sin_angle, cos_angle;
    sincosf(position * inv_freq[i], &sin_angle, &cos_angle);
    table[i] = RoundTo<T>(cos_angle * factor);
    table[half + i] = sign * RoundTo<T>(sin_angle * factor);
  }
  __syncthreads();
  const T* xt = x + token * heads * d;  // [H, d]
  T* yt = y + token * heads * d;        // [H, d]
  for (int64_t pair = threadIdx.x; pair < heads * half; pair += blockDim.x) {
    const int64_t i = pair % half;
    const int64_t offset = (pair / half) * d + i;  // head * d + i
    const float first = ToFloat(xt[offset]), second = ToFloat(xt[offset + half]);
    const float c = table[i], s = table[half + i];
    yt[offset] = FromFloat<T>(first * c - second * s);
    yt[offset + half] = FromFloat<T>(second * c + first * s);
  }
}

}  // namespace

void Rope(const Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          RopeDirection direction, Tensor& y, double attention_factor) {
  const int64_t n = x.dim(0), heads = x.dim(1), d = x.dim(2);
  if (n == 0 || heads == 0) return;
  const size_t shared_bytes = static_cast<size_t>(d) * sizeof(float);
  const float sign = direction == RopeDirection::kForward ? 1.0f : -1.0f;
  DispatchCudaFloat(x.dtype(), "Rope", [&]<typename T>() {
    RotateKernel<T><<<static_cast<unsigned>(n), kThreads, shared_bytes, StreamOf(ctx)>>>(
        x.data<T>(), positions.data<int32_t>(), inv_freq.data<float>(), heads, d, sign,
        static_cast<float>(attention_factor), y.data<T>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kelvin::ops::cuda
