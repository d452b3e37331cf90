// Vectorisable f32 math for the CPU kernels: an exp that GCC vectorises inside `omp simd` loops
// (libm's expf is a scalar call), and the attribute that compiles a kernel for baseline x86-64
// and for x86-64-v3 (AVX2), picked at load time. Used by the softmax cross-entropy, SwiGLU and
// the SSA kernels (ssa/cpu_vector_math.h); f64 kernels keep libm (f64 is the test dtype).
#pragma once

#include <cstdint>

// The project compiles with -fno-trapping-math and -fno-math-errno (cmake/KelvinWarnings.cmake),
// without which GCC keeps these selects and libm calls scalar; FP contraction stays off
// (-std=c++20), so both clones give the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KELVIN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KELVIN_SIMD_CLONES
#endif

namespace kelvin::ops::cpu {

// exp(x) in f32 within 1.02 ulp on [-87, 0] (measured against f64 exp at every float there), by
// Cephes expf's range reduction and polynomial: n = round(x / ln 2) by the 1.5 * 2^23 rounding
// trick, r = x - n ln 2 in two parts, exp(r) by a degree-7 polynomial, times 2^n built in the
// exponent bits. Below -87 (and at -inf) it returns 0; above 88 it saturates at exp(88); NaN
// stays NaN.
inline float ExpF32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound - kRound rounds x to an integer
  constexpr float kMin = -87.0f, kMax = 88.0f;
  const float above_min = x < kMin ? kMin : x;
  const float clamped = above_min > kMax ? kMax : above_min;
  const float n = (clamped * kLog2e + kRound) - kRound;
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * r * r + r + 1.0f;
  const float two_to_n = __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
  return x < kMin ? 0.0f : exp_r * two_to_n;
}

}  // namespace kelvin::ops::cpu
