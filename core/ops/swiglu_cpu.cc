// SwiGLU CPU kernels: OpenMP over chunks of the N * F elements, simd within a chunk. The f32
// sigmoid uses the vectorised ExpF32 (core/ops/cpu_vector_math.h; libm's expf does not
// vectorise), so the op stays memory-bound; f64 (tests) uses std::exp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/ops/cpu_vector_math.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/swiglu.h"

namespace kelvin::ops::cpu {
namespace {

// sigmoid(g) = 1 / (1 + e^-g), from t = e^-|g| (never overflows): 1 / (1 + t) for g >= 0 and
// t / (1 + t) for g < 0, the sign picking the factor through bit masks.
inline float Sigmoid(float g) {
  const float t = ExpF32(-std::abs(g));
  const int32_t negative = std::bit_cast<int32_t>(g) >> 31;  // all ones when g < 0
  const float factor = std::bit_cast<float>((std::bit_cast<int32_t>(t) & negative) |
                                            (std::bit_cast<int32_t>(1.0f) & ~negative));
  return factor / (1.0f + t);
}

inline double Sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// The kernels over elements [begin, end) (simd). f32 calls them through the cloned wrappers below.
template <typename T>
inline void ForwardRange(const T* g, const T* u, int64_t begin, int64_t end, T* o) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) o[i] = g[i] * Sigmoid(g[i]) * u[i];
}

template <typename T>
inline void BackwardRange(const T* dy, const T* g, const T* u, int64_t begin, int64_t end, T* dg,
                          T* du) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    // d silu / dg = sigmoid(g) (1 + g (1 - sigmoid(g))).
    const T gi = g[i], ui = u[i], dyi = dy[i], s = Sigmoid(gi);
    du[i] = dyi * gi * s;
    dg[i] = dyi * ui * s * (T(1) + gi * (T(1) - s));
  }
}

// The f32 sigmoid is heavy enough that 4-wide SSE2 leaves the op compute-bound on 2 cores: the
// f32 kernels are compiled for AVX2 too (KELVIN_SIMD_CLONES).
KELVIN_SIMD_CLONES void ForwardRangeF32(const float* g, const float* u, int64_t begin, int64_t end,
                                        float* o) {
  ForwardRange(g, u, begin, end, o);
}

KELVIN_SIMD_CLONES void BackwardRangeF32(const float* dy, const float* g, const float* u,
                                         int64_t begin, int64_t end, float* dg, float* du) {
  BackwardRange(dy, g, u, begin, end, dg, du);
}

// fn(begin, end) over chunks of kChunk elements, threaded above kParallelElements.
constexpr int64_t kChunk = 8192;
template <typename Fn>
void ForEachChunk(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace

void SwiGluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  DispatchCpuFloat(gate.dtype(), "SwiGluForward", [&]<typename T>() {
    const T* g = gate.data<T>();  // [N, F]
    const T* u = up.data<T>();    // [N, F]
    T* o = out.data<T>();         // [N, F]
    ForEachChunk(gate.numel(), [=](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) {
        ForwardRangeF32(g, u, begin, end, o);
      } else {
        ForwardRange(g, u, begin, end, o);
      }
    });
  });
}

void SwiGluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate,
                    Tensor& dup) {
  DispatchCpuFloat(gate.dtype(), "SwiGluBackward", [&]<typename T>() {
    const T* dy = dout.data<T>();  // [N, F]
    const T* g = gate.data<T>();   // [N, F]
    const T* u = up.data<T>();     // [N, F]
    T* dg = dgate.data<T>();       // [N, F]
    T* du = dup.data<T>();         // [N, F]
    ForEachChunk(gate.numel(), [=](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) {
        BackwardRangeF32(dy, g, u, begin, end, dg, du);
      } else {
        BackwardRange(dy, g, u, begin, end, dg, du);
      }
    });
  });
}

}  // namespace kelvin::ops::cpu
