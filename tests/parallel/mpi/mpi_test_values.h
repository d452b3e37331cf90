// Test values for the MPI test programs: element i of rank r, exact in every dtype (so sums in any
// order are exact before the final rounding), and tensors built from and read as doubles; the
// world as one group.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel::testing {

// Floating types: 1 + 3/8 r + 1/16 (i mod 7), exact in bf16 and summed exactly in f32 for up to
// 8 ranks. Integers: distinct per rank and index; i64 values need more than 32 bits.
double TestValue(DType dtype, int rank, int64_t index);

Tensor TensorOf(DType dtype, const std::vector<double>& values);  // [values.size()] on the host
std::vector<double> ValuesOf(const Tensor& host);

// MPI_COMM_WORLD as one CPU group named "world" (a 60 s timeout).
std::unique_ptr<Communicator> World();

}  // namespace kelvin::parallel::testing
