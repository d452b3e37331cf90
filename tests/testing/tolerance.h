// The project's tolerances, in one place (DESIGN.md "Tests"). Norm-wise relative errors
// ||actual - expected|| / ||expected|| against the f64 reference.
#pragma once

#include "core/dtype.h"

namespace kelvin::testing {

inline constexpr double kF64RelTol = 1e-12;
inline constexpr double kF32RelTol = 1e-5;
inline constexpr double kBF16RelTol = 2e-2;
// Central finite differences in f64 (step kFiniteDifferenceStep) against an analytic gradient.
inline constexpr double kFiniteDifferenceStep = 1e-6;
inline constexpr double kFiniteDifferenceRelTol = 1e-6;
// A low-precision fused kernel may have at most this multiple of the error of the naive
// same-precision computation against the f64 reference.
inline constexpr double kLowPrecisionErrorRatio = 2.0;

inline double RelTolerance(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return kF64RelTol;
    case DType::kBF16:
      return kBF16RelTol;
    default:
      return kF32RelTol;
  }
}

}  // namespace kelvin::testing
