// Device helpers shared by Kelvin's CUDA kernels: element conversion, block reductions, launch
// math.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"

namespace kelvin::cuda_utils {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(bf16 v) { return static_cast<float>(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float v) {
  return bf16(v);
}

// Rounds v to the precision of T (identity for float).
template <typename T>
__device__ __forceinline__ float RoundTo(float v) {
  return ToFloat(FromFloat<T>(v));
}

template <typename Acc>  // float, or double where f32 sums could overflow
__device__ __forceinline__ Acc WarpReduceSum(Acc v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpReduceMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
template <typename Acc>
__device__ __forceinline__ Acc BlockReduceSum(Acc v) {
  __shared__ Acc partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpReduceSum(v);
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / 32;
  v = lane < warps ? partial[lane] : Acc(0);
  return WarpReduceSum(v);
}

__device__ __forceinline__ float BlockReduceMax(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpReduceMax(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / 32;
  v = lane < warps ? partial[lane] : -INFINITY;
  return WarpReduceMax(v);
}

// kWidth consecutive elements moved by one 16-byte (or narrower) load or store.
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
  T v[kWidth];
};

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid size for a grid-stride loop over n elements.
inline unsigned GridFor(int64_t n, int threads, int64_t max_blocks = 65535) {
  const int64_t blocks = CeilDiv(n, threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// Rows per block along a grid's y dimension (at most 65535 blocks): `preferred`, or more when n
// rows would need more blocks than that.
inline int64_t RowsPerGridY(int64_t n, int64_t preferred) {
  constexpr int64_t kMaxGridY = 65535;
  const int64_t needed = CeilDiv(n, kMaxGridY);
  return needed > preferred ? needed : preferred;
}

}  // namespace kelvin::cuda_utils
