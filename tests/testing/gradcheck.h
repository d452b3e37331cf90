// Central finite-difference gradient checks in f64 for the explicit backward passes.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/tensor.h"

namespace kelvin::testing {

// d loss / d input by central differences (step kFiniteDifferenceStep), perturbing each element
// of `input` (an f64 host tensor that `loss` reads) in turn; input is restored afterwards.
Tensor NumericalGradient(const std::function<double()>& loss, Tensor& input);

// Passes when `analytic` matches the numerical gradient within kFiniteDifferenceRelTol.
::testing::AssertionResult GradientMatches(const std::function<double()>& loss, Tensor& input,
                                           const Tensor& analytic, const std::string& what);

// sum_i a_i * b_i over host tensors of any float dtype: the usual probe loss <dy, y>.
double Dot(const Tensor& a, const Tensor& b);

}  // namespace kelvin::testing
