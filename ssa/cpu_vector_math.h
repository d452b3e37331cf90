// Vectorised f32 math of the CPU SSA kernels: the exponentials of the tiled attention's softmax
// (ssa_attention_cpu.cc: rows of exp(x - shift)) and the GeLU rows of the temperatures
// (temperature.cc), on core's ExpF32 (core/ops/cpu_vector_math.h: std::exp and std::erf are
// scalar libm calls and dominated these loops), each compiled for baseline x86-64 and x86-64-v3;
// f64 keeps libm (f64 is the test dtype).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/ops/cpu_vector_math.h"

namespace kelvin::ssa::cpu {

using ops::cpu::ExpF32;

// x[i] = exp(x[i] - shift) for a finite shift; returns the sum of the new x.
KELVIN_SIMD_CLONES inline float ExpShiftedSum(float* x, int64_t n, float shift) {
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
KELVIN_SIMD_CLONES inline void ExpShifted(float* x, int64_t n, float shift) {
  if (shift == -std::numeric_limits<float>::infinity()) {
    std::fill(x, x + n, 0.0f);
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = ExpF32(x[i] - shift);
}

inline void ExpShifted(double* x, int64_t n, double shift) {
  if (shift == -std::numeric_limits<double>::infinity()) {
    std::fill(x, x + n, 0.0);
    return;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - shift);
}

// Phi(x) = P(N(0, 1) <= x) in f32: 0.5 erfc(-x / sqrt 2) by the Chebyshev fit of Numerical
// Recipes' erfcc (fractional error < 1.2e-7 for every argument) with ExpF32, so Phi keeps its
// relative accuracy in the far left tail, where 1 + erf(x) would cancel.
inline float NormalCdfF32(float x) {
  const float y = x * 0.70710678118654752f;  // erfc argument: -y
  const float z = y < 0 ? -y : y;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float half_erfc_z = 0.5f * t * ExpF32(p - z * z);  // 0.5 erfc(|y|)
  return y < 0 ? half_erfc_z : 1.0f - half_erfc_z;
}

// Sum over e < d of readout[e] GeLU(source[e]), GeLU(x) = x Phi(x) (the exact GeLU).
KELVIN_SIMD_CLONES inline float GeluDotF32(const float* source, const float* readout, int64_t d) {
  float z = 0;
#pragma omp simd reduction(+ : z)
  for (int64_t e = 0; e < d; ++e) z += readout[e] * source[e] * NormalCdfF32(source[e]);
  return z;
}

// The backward of GeluDotF32 scaled by dz: dreadout[e] += dz GeLU(source[e]) (f64 sums),
// dsource[e] += dz readout[e] GeLU'(source[e]), GeLU'(x) = Phi(x) + x phi(x).
KELVIN_SIMD_CLONES inline void GeluDotBackwardF32(const float* source, const float* readout,
                                                  float dz, double* dreadout, float* dsource,
                                                  int64_t d) {
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
#pragma omp simd
  for (int64_t e = 0; e < d; ++e) {
    const float x = source[e], cdf = NormalCdfF32(x);
    const float derivative = cdf + x * kInvSqrt2Pi * ExpF32(-0.5f * x * x);
    dreadout[e] += static_cast<double>(dz * x * cdf);
    dsource[e] += dz * readout[e] * derivative;
  }
}

}  // namespace kelvin::ssa::cpu
