// Elementwise CUDA kernels: one vectorised grid-stride "map" kernel (16-byte packs per operand when
// every pointer is 16-byte aligned) applied with a small functor per op; bf16 values are computed
// in f32 and rounded once. Each thread reads an element's inputs before writing its output, so
// outputs may alias inputs.
#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;
using cuda_utils::Pack;
using cuda_utils::ToFloat;

constexpr int kThreads = 256;

// out[i] = op(in[i]...) for i in [0, n): each thread handles kWidth consecutive elements per step
// of a grid-stride loop, then the last n % kWidth elements one at a time.
template <int kWidth, typename Op, typename Out, typename... In>
__global__ void MapKernel(int64_t n, Op op, Out* out, const In*... in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / kWidth;
  for (int64_t p = first; p < packs; p += stride) {
    const auto apply = [&](const Pack<In, kWidth>&... args) {
      Pack<Out, kWidth> result;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) result.v[k] = op(args.v[k]...);
      reinterpret_cast<Pack<Out, kWidth>*>(out)[p] = result;
    };
    apply(reinterpret_cast<const Pack<In, kWidth>*>(in)[p]...);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) out[i] = op(in[i]...);
}

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename Op, typename Out, typename... In>
void LaunchMap(const Context& ctx, int64_t n, Op op, Out* out, const In*... in) {
  if (n == 0) return;
  constexpr int kWidth = static_cast<int>(16 / std::max({sizeof(Out), sizeof(In)...}));
  const cudaStream_t stream = StreamOf(ctx);
  if (Aligned16(out) && (Aligned16(in) && ...)) {
    MapKernel<kWidth>
        <<<cuda_utils::GridFor(cuda_utils::CeilDiv(n, kWidth), kThreads), kThreads, 0, stream>>>(
            n, op, out, in...);
  } else {
    MapKernel<1><<<cuda_utils::GridFor(n, kThreads), kThreads, 0, stream>>>(n, op, out, in...);
  }
  KELVIN_CUDA_CHECK_LAUNCH();
}

template <typename T>
struct AddOp {
  __device__ T operator()(T a, T b) const { return FromFloat<T>(ToFloat(a) + ToFloat(b)); }
};

template <typename T>
struct ScaleOp {
  float alpha;
  __device__ T operator()(T x) const { return FromFloat<T>(alpha * ToFloat(x)); }
};

template <typename Y, typename X>
struct AxpyOp {
  float alpha;
  __device__ Y operator()(Y y, X x) const { return FromFloat<Y>(ToFloat(y) + alpha * ToFloat(x)); }
};

template <typename To, typename From>
struct CastOp {
  __device__ To operator()(From x) const { return FromFloat<To>(ToFloat(x)); }
};

template <typename T>
struct FillOp {
  T value;
  __device__ T operator()() const { return value; }
};

template <typename T>
void LaunchFill(const Context& ctx, T value, Tensor& t) {
  LaunchMap(ctx, t.numel(), FillOp<T>{value}, t.data<T>());
}

}  // namespace

void Add(const Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  DispatchCudaFloat(a.dtype(), "Add", [&]<typename T>() {
    LaunchMap(ctx, a.numel(), AddOp<T>{}, out.data<T>(), a.data<T>(), b.data<T>());
  });
}

void Scale(const Context& ctx, const Tensor& x, double alpha, Tensor& out) {
  DispatchCudaFloat(x.dtype(), "Scale", [&]<typename T>() {
    LaunchMap(ctx, x.numel(), ScaleOp<T>{static_cast<float>(alpha)}, out.data<T>(), x.data<T>());
  });
}

void Axpy(const Context& ctx, double alpha, const Tensor& x, Tensor& y) {
  DispatchCudaFloat(y.dtype(), "Axpy", [&]<typename Y>() {
    DispatchCudaFloat(x.dtype(), "Axpy", [&]<typename X>() {
      Y* py = y.data<Y>();
      LaunchMap(ctx, y.numel(), AxpyOp<Y, X>{static_cast<float>(alpha)}, py,
                static_cast<const Y*>(py), x.data<X>());
    });
  });
}

void Cast(const Context& ctx, const Tensor& x, Tensor& out) {
  DispatchCudaFloat(x.dtype(), "Cast", [&]<typename From>() {
    DispatchCudaFloat(out.dtype(), "Cast", [&]<typename To>() {
      LaunchMap(ctx, x.numel(), CastOp<To, From>{}, out.data<To>(), x.data<From>());
    });
  });
}

void Fill(const Context& ctx, Tensor& t, double value) {
  switch (t.dtype()) {
    case DType::kF32:
      return LaunchFill(ctx, static_cast<float>(value), t);
    case DType::kBF16:
      return LaunchFill(ctx, Bf16FromDouble(value), t);
    case DType::kF64:
      return LaunchFill(ctx, value, t);
    case DType::kI32:
      return LaunchFill(ctx, static_cast<int32_t>(value), t);
    case DType::kI64:
      return LaunchFill(ctx, static_cast<int64_t>(value), t);
  }
}

}  // namespace kelvin::ops::cuda
