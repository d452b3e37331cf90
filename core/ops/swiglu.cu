// SwiGLU CUDA kernels: vectorised grid-stride loops over the N * F elements (16-byte packs per
// tensor when every pointer is 16-byte aligned, else one element at a time), math in f32. For bf16
// the intermediate tensors of Hugging Face's bf16 graph are rounded where it rounds them:
// act = silu(gate), and in the backward dact = dout * up.
#include <cstdint>
#include <initializer_list>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/swiglu.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::Pack;
using cuda_utils::RoundTo;
using cuda_utils::ToFloat;

constexpr int kThreads = 256;

template <int kWidth, typename T>
__device__ __forceinline__ Pack<T, kWidth> LoadPack(const T* base, int64_t pack) {
  return reinterpret_cast<const Pack<T, kWidth>*>(base)[pack];
}

template <int kWidth, typename T>
__device__ __forceinline__ void StorePack(T* base, int64_t pack, const Pack<T, kWidth>& value) {
  reinterpret_cast<Pack<T, kWidth>*>(base)[pack] = value;
}

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
__device__ __forceinline__ T ForwardValue(T gate, T up) {
  const float g = ToFloat(gate);
  return FromFloat<T>(RoundTo<T>(g * Sigmoid(g)) * ToFloat(up));
}

// Writes dgate and dup of one element (inputs read first, so outputs may alias them).
template <typename T>
__device__ __forceinline__ void BackwardValue(T dout, T gate, T up, T& dgate, T& dup) {
  const float g = ToFloat(gate), dy = ToFloat(dout), s = Sigmoid(g);
  const float dact = RoundTo<T>(dy * ToFloat(up));
  dup = FromFloat<T>(dy * RoundTo<T>(g * s));
  dgate = FromFloat<T>(dact * s * (1.0f + g * (1.0f - s)));  // d silu / dg
}

// Threads take packs of kWidth elements in a grid-stride loop, then single elements past the last
// whole pack.
template <int kWidth, typename T>
__global__ void ForwardKernel(int64_t n, const T* gate, const T* up, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / kWidth;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, kWidth> g = LoadPack<kWidth>(gate, p), u = LoadPack<kWidth>(up, p);
    Pack<T, kWidth> o;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) o.v[k] = ForwardValue(g.v[k], u.v[k]);
    StorePack(out, p, o);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) {
    out[i] = ForwardValue(gate[i], up[i]);
  }
}

template <int kWidth, typename T>
__global__ void BackwardKernel(int64_t n, const T* dout, const T* gate, const T* up, T* dgate,
                               T* dup) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / kWidth;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, kWidth> dy = LoadPack<kWidth>(dout, p), g = LoadPack<kWidth>(gate, p),
                          u = LoadPack<kWidth>(up, p);
    Pack<T, kWidth> dg, du;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) BackwardValue(dy.v[k], g.v[k], u.v[k], dg.v[k], du.v[k]);
    StorePack(dgate, p, dg);
    StorePack(dup, p, du);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) {
    BackwardValue(dout[i], gate[i], up[i], dgate[i], dup[i]);
  }
}

bool AllAligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Launches kernel<16 / sizeof(T)> when every pointer allows 16-byte packs, else kernel<1>.
template <typename T, typename Launch>
void LaunchVectorised(const Context& ctx, int64_t n, std::initializer_list<const void*> pointers,
                      Launch&& launch) {
  if (n == 0) return;
  constexpr int kWidth = 16 / sizeof(T);
  const cudaStream_t stream = StreamOf(ctx);
  if (AllAligned16(pointers)) {
    launch.template operator()<kWidth>(
        cuda_utils::GridFor(cuda_utils::CeilDiv(n, kWidth), kThreads), stream);
  } else {
    launch.template operator()<1>(cuda_utils::GridFor(n, kThreads), stream);
  }
  KELVIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void SwiGluForward(const Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  DispatchCudaFloat(gate.dtype(), "SwiGluForward", [&]<typename T>() {
    const T* g = gate.data<T>();  // [N, F]
    const T* u = up.data<T>();    // [N, F]
    T* o = out.data<T>();         // [N, F]
    const int64_t n = gate.numel();
    LaunchVectorised<T>(ctx, n, {g, u, o}, [&]<int kWidth>(unsigned grid, cudaStream_t stream) {
      ForwardKernel<kWidth><<<grid, kThreads, 0, stream>>>(n, g, u, o);
    });
  });
}

void SwiGluBackward(const Context& ctx, const Tensor& dout, const Tensor& gate, const Tensor& up,
                    Tensor& dgate, Tensor& dup) {
  DispatchCudaFloat(gate.dtype(), "SwiGluBackward", [&]<typename T>() {
    const T* dy = dout.data<T>();  // [N, F]
    const T* g = gate.data<T>();   // [N, F]
    const T* u = up.data<T>();     // [N, F]
    T* dg = dgate.data<T>();       // [N, F]
    T* du = dup.data<T>();         // [N, F]
    const int64_t n = gate.numel();
    LaunchVectorised<T>(
        ctx, n, {dy, g, u, dg, du}, [&]<int kWidth>(unsigned grid, cudaStream_t stream) {
          BackwardKernel<kWidth><<<grid, kThreads, 0, stream>>>(n, dy, g, u, dg, du);
        });
  });
}

}  // namespace kelvin::ops::cuda
