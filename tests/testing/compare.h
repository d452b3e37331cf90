// Norm-wise tensor comparison for tests: the failure message prints the relative error, the
// largest elementwise error with its index and both values, and the tolerance.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/tensor.h"

namespace kelvin::testing {

struct ErrorReport {
  double rel_error = 0;      // ||a - e|| / ||e|| (||a - e|| when ||e|| == 0)
  double max_abs_error = 0;  // max_i |a_i - e_i|
  int64_t max_index = 0;     // flat index of that element
  double actual_at_max = 0, expected_at_max = 0;
  bool has_nan = false;  // a NaN/inf in actual where expected is finite
};

// Any dtypes and devices (device tensors are copied to the host first).
ErrorReport CompareTensors(const Tensor& actual, const Tensor& expected);

// Passes when rel_error <= rel_tol and nothing is NaN; `what` names the tensor in the message.
::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rel_tol,
                                    const std::string& what = "tensor");

// Bit-for-bit equality of two tensors of the same dtype and shape.
::testing::AssertionResult BitIdentical(const Tensor& actual, const Tensor& expected,
                                        const std::string& what = "tensor");

}  // namespace kelvin::testing
