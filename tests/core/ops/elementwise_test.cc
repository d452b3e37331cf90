// Elementwise ops: fast CPU and CUDA against the naive reference on odd shapes, misaligned views
// and in place; Cast's rounding bit for bit (ties to even, overflow, NaN, f64 without double
// rounding); Fill of every dtype; the backward functions against f64 finite differences.
#include "core/ops/elementwise.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/ops/reference/elementwise.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

constexpr double kAlpha = -1.75;  // exact in every float dtype

// Shapes of the consistency tests: 71 x 229 is not a multiple of any vector width; 3 x 4096 is a
// realistic row.
const std::vector<Shape>& TestShapes() {
  static const std::vector<Shape> shapes = {{1}, {71, 229}, {3, 4096}, {2, 3, 5}};
  return shapes;
}

// A device copy of host tensor t starting one element into its buffer: its data pointer is not
// 16-byte aligned, so the CUDA kernels take their element-by-element path.
Tensor MisalignedCopy(const Context& ctx, const Tensor& t, Device device) {
  Tensor buffer = Tensor::Empty({t.numel() + 1}, t.dtype(), device);
  Tensor view = buffer.Slice(1, t.numel() + 1).View(t.shape());
  CopyTensor(ctx, t, view);
  return view;
}

class ElementwiseTest : public ::testing::TestWithParam<Backend> {};

TEST_P(ElementwiseTest, AddScaleAxpyMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const double tol = testing::RelTolerance(backend.dtype);
  uint64_t seed = 400;
  for (const Shape& shape : TestShapes()) {
    for (const bool misaligned : {false, true}) {
      SCOPED_TRACE(ShapeToString(shape) + (misaligned ? " misaligned" : ""));
      const Tensor a = testing::Random(shape, backend.dtype, ++seed);
      const Tensor b = testing::Random(shape, backend.dtype, ++seed);
      const auto on_device = [&](const Tensor& t) {
        return misaligned ? MisalignedCopy(ctx, t, backend.device)
                          : CopyToDevice(ctx, t, backend.device);
      };
      const Tensor a64 = testing::Cast(a, DType::kF64), b64 = testing::Cast(b, DType::kF64);

      Tensor expected = Tensor::Empty(shape, DType::kF64);
      reference::Add(a64, b64, expected);
      Tensor out = on_device(Tensor::ZerosCpu(shape, backend.dtype));
      ops::Add(ctx, on_device(a), on_device(b), out);
      EXPECT_TRUE(testing::AllClose(out, expected, tol, "add"));
      Tensor in_place = on_device(a);
      ops::Add(ctx, in_place, on_device(b), in_place);
      EXPECT_TRUE(testing::BitIdentical(in_place, out, "add into a"));

      reference::Scale(a64, kAlpha, expected);
      ops::Scale(ctx, on_device(a), kAlpha, out);
      EXPECT_TRUE(testing::AllClose(out, expected, tol, "scale"));
      in_place = on_device(a);
      ops::Scale(ctx, in_place, kAlpha, in_place);
      EXPECT_TRUE(testing::BitIdentical(in_place, out, "scale in place"));

      // y += alpha x, with x of y's dtype, and for f32 y also with bf16 x (gradient accumulation).
      std::vector<DType> x_dtypes = {backend.dtype};
      if (backend.dtype == DType::kF32) x_dtypes.push_back(DType::kBF16);
      for (const DType x_dtype : x_dtypes) {
        SCOPED_TRACE(std::string("axpy x ") + std::string(DTypeName(x_dtype)));
        const Tensor x = testing::Random(shape, x_dtype, ++seed);
        Tensor y_expected = testing::Cast(b, DType::kF64);
        reference::Axpy(kAlpha, testing::Cast(x, DType::kF64), y_expected);
        Tensor y = on_device(b);
        ops::Axpy(ctx, kAlpha, on_device(x), y);
        EXPECT_TRUE(testing::AllClose(y, y_expected, tol, "axpy"));
      }
    }
  }
}

TEST_P(ElementwiseTest, BackwardsMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  uint64_t seed = 500;
  for (const Shape& shape : TestShapes()) {
    SCOPED_TRACE(ShapeToString(shape));
    const Tensor dout = testing::Random(shape, backend.dtype, ++seed);
    const Tensor dout_d = testing::ToDevice(dout, backend.device);

    Tensor da = Tensor::Empty(shape, backend.dtype, backend.device);
    Tensor db = Tensor::Empty(shape, backend.dtype, backend.device);
    ops::AddBackward(ctx, dout_d, da, db);
    EXPECT_TRUE(testing::BitIdentical(da, dout, "da"));
    EXPECT_TRUE(testing::BitIdentical(db, dout, "db"));

    Tensor expected = Tensor::Empty(shape, DType::kF64);
    reference::ScaleBackward(testing::Cast(dout, DType::kF64), kAlpha, expected);
    Tensor dx = Tensor::Empty(shape, backend.dtype, backend.device);
    ops::ScaleBackward(ctx, dout_d, kAlpha, dx);
    EXPECT_TRUE(testing::AllClose(dx, expected, testing::RelTolerance(backend.dtype), "dx"));

    // Cast's backward casts dout back to the input's dtype: from the backend dtype to f32.
    Tensor dx_expected = Tensor::Empty(shape, DType::kF32);
    reference::CastBackward(dout, dx_expected);
    Tensor dx_f32 = Tensor::Empty(shape, DType::kF32, backend.device);
    ops::CastBackward(ctx, dout_d, dx_f32);
    EXPECT_TRUE(testing::BitIdentical(dx_f32, dx_expected, "cast dx"));
  }
}

// Every pair of float dtypes the device supports, on random values (all of whose conversions are
// exactly defined): the same bits as the reference.
TEST_P(ElementwiseTest, CastMatchesReferenceBitForBit) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  std::vector<DType> targets = {DType::kF32, DType::kBF16};
  if (backend.device.is_cpu()) targets.push_back(DType::kF64);
  uint64_t seed = 600;
  for (const Shape& shape : TestShapes()) {
    // Values of the backend dtype spread over many binades, so every rounding matters.
    Tensor x = testing::Random(shape, DType::kF64, ++seed, -1, 1);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] *= std::exp2(i % 60 - 30);
    x = testing::Cast(x, backend.dtype);
    for (const DType target : targets) {
      SCOPED_TRACE(ShapeToString(shape) + " to " + std::string(DTypeName(target)));
      Tensor expected = Tensor::Empty(shape, target);
      reference::Cast(x, expected);
      Tensor out = Tensor::Empty(shape, target, backend.device);
      ops::Cast(ctx, testing::ToDevice(x, backend.device), out);
      EXPECT_TRUE(testing::BitIdentical(out, expected, "cast"));
    }
  }
}

TEST_P(ElementwiseTest, FillEveryDType) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF64, DType::kI32, DType::kI64}) {
    for (const Shape& shape : TestShapes()) {
      SCOPED_TRACE(ShapeToString(shape) + " " + std::string(DTypeName(dtype)));
      const double value = IsFloating(dtype) ? -2.5 : -7.0;
      Tensor t = Tensor::Empty(shape, dtype, backend.device);
      ops::Fill(ctx, t, value);
      EXPECT_TRUE(testing::BitIdentical(t, testing::Full(shape, dtype, value), "filled"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ElementwiseTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

struct Bf16Rounding {
  uint32_t f32_bits;
  uint16_t bf16_bits;
  const char* what;
};
// bf16 keeps the top 16 bits of an f32; the low 16 decide the rounding (0x8000 is the tie).
constexpr Bf16Rounding kF32ToBf16[] = {
    {0x3f800000, 0x3f80, "1.0 exact"},
    {0x3f808000, 0x3f80, "tie, even below"},
    {0x3f818000, 0x3f82, "tie, even above"},
    {0x3f808001, 0x3f81, "just above a tie"},
    {0x3f807fff, 0x3f80, "just below a tie"},
    {0xbf808000, 0xbf80, "negative tie, even below"},
    {0xbf818000, 0xbf82, "negative tie, even above"},
    {0x7f7f7fff, 0x7f7f, "rounds down to the largest bf16"},
    {0x7f7fffff, 0x7f80, "largest f32 rounds up to inf"},
    {0x7f800000, 0x7f80, "inf"},
    {0xff800000, 0xff80, "-inf"},
    {0x7fc00000, 0x7fc0, "quiet NaN"},
    {0x7f800001, 0x7fc0, "signalling NaN stays NaN (quietened)"},
    {0x00018000, 0x0002, "subnormal tie, even above"},
    {0x80000000, 0x8000, "-0"},
};

// bf16 rounding cases as a [count] f32 host tensor and the expected [count] bf16 host tensor.
void Bf16Cases(Tensor& input, Tensor& expected) {
  const int64_t n = static_cast<int64_t>(std::size(kF32ToBf16));
  input = Tensor::Empty({n}, DType::kF32);
  expected = Tensor::Empty({n}, DType::kBF16);
  for (int64_t i = 0; i < n; ++i) {
    input.data<float>()[i] = std::bit_cast<float>(kF32ToBf16[i].f32_bits);
    expected.data<bf16>()[i] = bf16::FromBits(kF32ToBf16[i].bf16_bits);
  }
}

class CastRoundingTest : public ::testing::TestWithParam<Backend> {};

TEST_P(CastRoundingTest, F32ToBf16RoundsToNearestEven) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  Tensor input, expected;
  Bf16Cases(input, expected);
  Tensor out = Tensor::Empty(input.shape(), DType::kBF16, backend.device);
  ops::Cast(ctx, testing::ToDevice(input, backend.device), out);
  const Tensor host = testing::ToHost(out);
  for (int64_t i = 0; i < input.numel(); ++i) {
    EXPECT_EQ(host.data<bf16>()[i].bits, expected.data<bf16>()[i].bits) << kF32ToBf16[i].what;
  }
  // And back: bf16 -> f32 is exact (the bits shifted up).
  Tensor back = Tensor::Empty(input.shape(), DType::kF32, backend.device);
  ops::Cast(ctx, out, back);
  const Tensor back_host = testing::ToHost(back);
  for (int64_t i = 0; i < input.numel(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(back_host.data<float>()[i]),
              uint32_t{expected.data<bf16>()[i].bits} << 16)
        << kF32ToBf16[i].what;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CastRoundingTest,
                         ::testing::Values(Backend{Device::Cpu(), DType::kF32},
                                           Backend{Device::Cuda(0), DType::kF32}),
                         testing::BackendName());

// f64 sources (CPU only) round once: a value just above a bf16 tie must not become a tie in f32.
TEST(CastRounding, F64ToBf16AndF32RoundOnce) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  struct Case {
    double value;
    uint16_t bf16_bits;
    uint32_t f32_bits;
    const char* what;
  };
  const Case cases[] = {
      {1 + 0x1p-8 + 0x1p-30, 0x3f81, 0x3f808000, "above a bf16 tie by less than f32 resolves"},
      {1 + 0x1p-8, 0x3f80, 0x3f808000, "bf16 tie, even below"},
      {1 + 0x1p-24, 0x3f80, 0x3f800000, "f32 tie, even below"},
      {1 + 0x1p-24 + 0x1p-50, 0x3f80, 0x3f800001, "just above an f32 tie"},
      {1e300, 0x7f80, 0x7f800000, "overflow to inf"},
      {-1e300, 0xff80, 0xff800000, "overflow to -inf"},
      {1e-50, 0x0000, 0x00000000, "underflow to 0"},
      {std::numeric_limits<double>::quiet_NaN(), 0x7fc0, 0x7fc00000, "NaN"},
  };
  const int64_t n = static_cast<int64_t>(std::size(cases));
  Tensor x = Tensor::Empty({n}, DType::kF64);
  for (int64_t i = 0; i < n; ++i) x.data<double>()[i] = cases[i].value;
  Tensor to_bf16 = Tensor::Empty({n}, DType::kBF16), to_f32 = Tensor::Empty({n}, DType::kF32);
  ops::Cast(ctx, x, to_bf16);
  ops::Cast(ctx, x, to_f32);
  Tensor reference_bf16 = Tensor::Empty({n}, DType::kBF16);
  reference::Cast(x, reference_bf16);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(cases[i].what);
    EXPECT_EQ(to_bf16.data<bf16>()[i].bits, cases[i].bf16_bits);
    EXPECT_EQ(reference_bf16.data<bf16>()[i].bits, cases[i].bf16_bits) << "reference";
    EXPECT_EQ(std::bit_cast<uint32_t>(to_f32.data<float>()[i]), cases[i].f32_bits);
  }
  // f32 -> f64 is exact.
  Tensor round_trip = Tensor::Empty({n}, DType::kF64);
  ops::Cast(ctx, to_f32, round_trip);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(to_f32.data<float>()[i])) continue;
    EXPECT_EQ(round_trip.data<double>()[i], static_cast<double>(to_f32.data<float>()[i]));
  }
}

// loss = <dout, op(inputs)>: the backward functions give its gradients (reference and fast CPU).
TEST(ElementwiseGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const Shape shape = {3, 5};
  Tensor a = testing::Random(shape, DType::kF64, 1), b = testing::Random(shape, DType::kF64, 2);
  const Tensor dout = testing::Random(shape, DType::kF64, 3);
  const auto probe = [&](auto forward) {
    return [&, forward] {
      Tensor out = Tensor::Empty(shape, DType::kF64);
      forward(out);
      return testing::Dot(dout, out);
    };
  };
  const auto add_loss = probe([&](Tensor& out) { reference::Add(a, b, out); });
  const auto scale_loss = probe([&](Tensor& out) { reference::Scale(a, kAlpha, out); });
  const auto cast_loss = probe([&](Tensor& out) { reference::Cast(a, out); });
  const Context& ctx = testing::ContextFor(Device::Cpu());
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor da = Tensor::Empty(shape, DType::kF64), db = Tensor::Empty(shape, DType::kF64);
    Tensor dscale = Tensor::Empty(shape, DType::kF64), dcast = Tensor::Empty(shape, DType::kF64);
    if (fast) {
      ops::AddBackward(ctx, dout, da, db);
      ops::ScaleBackward(ctx, dout, kAlpha, dscale);
      ops::CastBackward(ctx, dout, dcast);
    } else {
      reference::AddBackward(dout, da, db);
      reference::ScaleBackward(dout, kAlpha, dscale);
      reference::CastBackward(dout, dcast);
    }
    EXPECT_TRUE(testing::GradientMatches(add_loss, a, da, "add da"));
    EXPECT_TRUE(testing::GradientMatches(add_loss, b, db, "add db"));
    EXPECT_TRUE(testing::GradientMatches(scale_loss, a, dscale, "scale dx"));
    EXPECT_TRUE(testing::GradientMatches(cast_loss, a, dcast, "cast dx"));
  }
}

}  // namespace
}  // namespace kelvin
