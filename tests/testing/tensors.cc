// Seeded test tensors and host-side casts.
#include "tests/testing/tensors.h"

#include <cstring>
#include <random>

#include "core/copy.h"
#include "core/ops/reference/values.h"
#include "tests/testing/backends.h"

namespace kelvin::testing {

Tensor Random(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(NumElements(shape)));
  for (double& v : values) v = dist(rng);
  Tensor t = Tensor::Empty(shape, dtype);
  reference::FromDoubles(values, t);
  return t;
}

Tensor RandomInts(const Shape& shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(NumElements(shape)));
  for (double& v : values) v = static_cast<double>(dist(rng));
  Tensor t = Tensor::Empty(shape, dtype);
  reference::FromDoubles(values, t);
  return t;
}

Tensor Cast(const Tensor& t, DType dtype) {
  Tensor out = Tensor::Empty(t.shape(), dtype);
  reference::FromDoubles(reference::ToDoubles(ToHost(t)), out);
  return out;
}

Tensor ToHost(const Tensor& t) {
  if (t.is_cpu()) return t;
  return CopyToDevice(ContextFor(t.device()), t, Device::Cpu());
}

Tensor Full(const Shape& shape, DType dtype, double value) {
  Tensor t = Tensor::Empty(shape, dtype);
  reference::FromDoubles(std::vector<double>(static_cast<size_t>(t.numel()), value), t);
  return t;
}

Tensor SliceAlong(const Tensor& t, int axis, int64_t begin, int64_t count) {
  if (axis < 0) return t;
  KELVIN_CHECK(t.is_cpu() && (axis == 0 || t.ndim() == 2)) << "SliceAlong: " << t.ToString();
  if (axis == 0) return ToHost(t.Slice(begin, begin + count));
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const size_t bytes = DTypeSize(t.dtype());
  Tensor out = Tensor::Empty({rows, count}, t.dtype());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(out.raw_data()) + r * count * bytes,
                static_cast<const char*>(t.raw_data()) + (r * cols + begin) * bytes, count * bytes);
  }
  return out;
}

}  // namespace kelvin::testing
