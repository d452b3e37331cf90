// Test tensors: seeded random values, dtype casts through f64, host copies.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kelvin::testing {

// Host tensor of uniform values in [lo, hi), drawn in f64 from `seed` then rounded to `dtype`.
Tensor Random(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Host tensor of uniform integers in [lo, hi] (i32 or i64).
Tensor RandomInts(const Shape& shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi);
// Host copy of t with every value converted to `dtype` (f64 copies of low-precision inputs are
// exact, so the reference sees precisely the values the kernel saw).
Tensor Cast(const Tensor& t, DType dtype);
// Host copy of a tensor on any device.
Tensor ToHost(const Tensor& t);
// Host tensor filled with one value.
Tensor Full(const Shape& shape, DType dtype, double value);
// A host copy of indices [begin, begin + count) along `axis` (0 or 1) of a 1-D or 2-D host tensor,
// or `t` itself when axis < 0 (what one tensor-parallel rank holds of a full parameter).
Tensor SliceAlong(const Tensor& t, int axis, int64_t begin, int64_t count);

}  // namespace kelvin::testing
