// An op's output buffer with guard elements on both sides, filled with a sentinel: a kernel that
// writes outside its output changes a guard, which GuardsIntact reports with the first index.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/tensor.h"

namespace kelvin::testing {

class GuardedOutput {
 public:
  static constexpr int64_t kGuard = 64;  // elements on each side

  // [kGuard + numel + kGuard] of `dtype` on `device`, all the sentinel; `interior` (a host tensor
  // of `shape`, converted to `dtype`) replaces the middle when given (an accumulated output).
  GuardedOutput(const Shape& shape, DType dtype, Device device, const Tensor* interior = nullptr);

  Tensor& view() { return view_; }  // the output [shape], inside the guards

  // Passes when every guard element still holds the sentinel's bits.
  ::testing::AssertionResult GuardsIntact(const std::string& what) const;

 private:
  Tensor whole_;     // [kGuard + numel + kGuard]
  Tensor view_;      // shape, the middle of whole_
  Tensor sentinel_;  // host copy of whole_ as filled
};

}  // namespace kelvin::testing
