// The exponentials of the tiled CPU SSA attention's softmax (ssa_attention_cpu.cc): rows of
// exp(x - shift). f32 uses a polynomial exp written for the compiler to vectorise (std::exp is a
// scalar libm call, and it dominated the tile loop); f64 keeps std::exp (f64 is the test dtype).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace kelvin::ssa::cpu {

// exp(x) in f32 within ~2 ulp (Cephes expf's range reduction and polynomial): n = round(x / ln 2)
// by the 1.5 * 2^23 rounding trick, r = x - n ln 2 in two parts, exp(r) by a degree-7 polynomial,
// times 2^n built in the exponent bits. Below -87 (and at -inf) it returns 0; NaN stays NaN.
inline float ExpF32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound - kRound rounds x to an integer
  constexpr float kMin = -87.0f, kMax = 88.0f;
  const float clamped = std::min(std::max(x, kMin), kMax);
  const float shifted = clamped * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * r * r + r + 1.0f;
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  const float two_to_n = std::bit_cast<float>((exponent + 127) << 23);
  return x < kMin ? 0.0f : exp_r * two_to_n;
}

// x[i] = exp(x[i] - shift) for a finite shift; returns the sum of the new x.
inline float ExpShiftedSum(float* x, int64_t n, float shift) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    x[i] = ExpF32(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline double ExpShiftedSum(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// x[i] = exp(x[i] - shift); a shift of -inf (a row that sees no key) gives zeros.
template <typename T>
void ExpShifted(T* x, int64_t n, T shift) {
  if (shift == -std::numeric_limits<T>::infinity()) {
    std::fill(x, x + n, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] = ExpF32(x[i] - shift);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - shift);
  }
}

}  // namespace kelvin::ssa::cpu
