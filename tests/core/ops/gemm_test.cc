// GEMM: fast CPU (OpenBLAS) and CUDA (cuBLASLt) against the naive f64 reference for every
// transpose pair, odd shapes, alpha/beta (beta = 0 over NaN, beta = 1 accumulating) and every
// supported dtype pair; the backward against the reference and against f64 finite differences;
// the argument checks. M rows of C, N columns of C, K contracted.
#include "core/ops/gemm.h"

#include <gtest/gtest.h>

#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/ops/reference/gemm.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Where a GEMM runs and its dtypes: `inputs` for a, b (and dc), `output` for c (and da, db).
struct GemmBackend {
  Backend inputs;
  DType output;
  // "cpu_bf16_to_f32", "cuda_f32_to_f32": CUDA cases keep "cuda" in their names.
  std::string Name() const { return inputs.Name() + "_to_" + std::string(DTypeName(output)); }
};

std::vector<GemmBackend> GemmBackends() {
  std::vector<GemmBackend> all;
  for (const Backend& backend : testing::AllBackends()) all.push_back({backend, backend.dtype});
  all.push_back({{Device::Cpu(), DType::kBF16}, DType::kBF16});
  all.push_back({{Device::Cpu(), DType::kBF16}, DType::kF32});
  all.push_back({{Device::Cuda(0), DType::kBF16}, DType::kF32});
  return all;
}

// gtest prints parameters of failing cases with this.
void PrintTo(const GemmBackend& backend, std::ostream* out) { *out << backend.Name(); }

struct GemmBackendName {
  std::string operator()(const ::testing::TestParamInfo<GemmBackend>& info) const {
    return info.param.Name();
  }
};

struct GemmShape {
  int64_t m, n, k;
};
// 3 x 4096 x 5 is a realistic row length; K = 0 is the empty sum (C = beta * C).
constexpr GemmShape kShapes[] = {{1, 1, 1},    {71, 229, 13},  {3, 4096, 5},
                                 {64, 64, 64}, {130, 17, 257}, {5, 7, 0}};
constexpr bool kTransposes[] = {false, true};

struct Scaling {
  float alpha, beta;
};
// beta = 0 runs over a C full of NaN: nothing of it may leak into the result.
constexpr Scaling kScalings[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}};

// The stored shape of X when op(X) is [rows, cols].
Shape Stored(int64_t rows, int64_t cols, bool transpose) {
  return transpose ? Shape{cols, rows} : Shape{rows, cols};
}

// The initial contents of an output that `beta` (0 or not) scales: NaN when it must not be read.
Tensor InitialOutput(const Shape& shape, DType dtype, bool read, uint64_t seed) {
  return read ? testing::Random(shape, dtype, seed) : testing::Full(shape, dtype, kNaN);
}

// Inputs are exact in bf16 and the reference sees the same values, so what remains is the f32
// sums (within the f32 tolerance) and, for a bf16 output, its final rounding.
double ToleranceFor(const GemmBackend& backend) { return testing::RelTolerance(backend.output); }

class GemmTest : public ::testing::TestWithParam<GemmBackend> {};

TEST_P(GemmTest, ForwardMatchesReference) {
  const GemmBackend backend = GetParam();
  const Device device = backend.inputs.device;
  KELVIN_SKIP_WITHOUT_CUDA(device);
  const Context& ctx = testing::ContextFor(device);
  const DType in = backend.inputs.dtype, out = backend.output;
  uint64_t seed = 1000;
  for (const auto [m, n, k] : kShapes) {
    for (const bool transpose_a : kTransposes) {
      for (const bool transpose_b : kTransposes) {
        for (const auto [alpha, beta] : kScalings) {
          SCOPED_TRACE(::testing::Message()
                       << "[M, N, K] = " << ShapeToString({m, n, k}) << " transpose_a "
                       << transpose_a << " transpose_b " << transpose_b << " alpha " << alpha
                       << " beta " << beta);
          const Tensor a = testing::Random(Stored(m, k, transpose_a), in, ++seed);  // [M, K]
          const Tensor b = testing::Random(Stored(k, n, transpose_b), in, ++seed);  // [K, N]
          const Tensor c0 = InitialOutput({m, n}, out, beta != 0.0f, ++seed);       // [M, N]

          Tensor c_ref = testing::Cast(c0, DType::kF64);
          reference::Gemm(testing::Cast(a, DType::kF64), transpose_a, testing::Cast(b, DType::kF64),
                          transpose_b, c_ref, alpha, beta);

          Tensor c = testing::ToDevice(c0, device);
          ops::Gemm(ctx, testing::ToDevice(a, device), transpose_a, testing::ToDevice(b, device),
                    transpose_b, c, alpha, beta);
          EXPECT_TRUE(testing::AllClose(c, c_ref, ToleranceFor(backend), "c"));
        }
      }
    }
  }
}

TEST_P(GemmTest, BackwardMatchesReference) {
  const GemmBackend backend = GetParam();
  const Device device = backend.inputs.device;
  KELVIN_SKIP_WITHOUT_CUDA(device);
  const Context& ctx = testing::ContextFor(device);
  const DType in = backend.inputs.dtype, out = backend.output;
  uint64_t seed = 2000;
  for (const auto [m, n, k] :
       {GemmShape{1, 1, 1}, GemmShape{71, 229, 13}, GemmShape{130, 17, 257}}) {
    for (const bool transpose_a : kTransposes) {
      for (const bool transpose_b : kTransposes) {
        for (const bool accumulate : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "[M, N, K] = " << ShapeToString({m, n, k})
                                            << " transpose_a " << transpose_a << " transpose_b "
                                            << transpose_b << " accumulate " << accumulate);
          const Shape a_shape = Stored(m, k, transpose_a), b_shape = Stored(k, n, transpose_b);
          const Tensor a = testing::Random(a_shape, in, ++seed);  // [M, K] or [K, M]
          const Tensor b = testing::Random(b_shape, in, ++seed);  // [K, N] or [N, K]
          const Tensor dc = testing::Random({m, n}, in, ++seed);  // [M, N]
          // Written gradients start as NaN, accumulated ones from random values.
          const Tensor da0 = InitialOutput(a_shape, out, accumulate, ++seed);
          const Tensor db0 = InitialOutput(b_shape, out, accumulate, ++seed);

          Tensor da_ref = testing::Cast(da0, DType::kF64), db_ref = testing::Cast(db0, DType::kF64);
          reference::GemmBackward(testing::Cast(dc, DType::kF64), testing::Cast(a, DType::kF64),
                                  transpose_a, testing::Cast(b, DType::kF64), transpose_b, &da_ref,
                                  &db_ref, accumulate, accumulate);

          const Tensor a_dev = testing::ToDevice(a, device), b_dev = testing::ToDevice(b, device);
          const Tensor dc_dev = testing::ToDevice(dc, device);
          Tensor da = testing::ToDevice(da0, device), db = testing::ToDevice(db0, device);
          ops::GemmBackward(ctx, dc_dev, a_dev, transpose_a, b_dev, transpose_b, &da, &db,
                            accumulate, accumulate);
          EXPECT_TRUE(testing::AllClose(da, da_ref, ToleranceFor(backend), "da"));
          EXPECT_TRUE(testing::AllClose(db, db_ref, ToleranceFor(backend), "db"));

          // Each gradient alone (the other skipped with nullptr) gives the same values.
          Tensor da_only = testing::ToDevice(da0, device), db_only = testing::ToDevice(db0, device);
          ops::GemmBackward(ctx, dc_dev, a_dev, transpose_a, b_dev, transpose_b, &da_only, nullptr,
                            accumulate, accumulate);
          ops::GemmBackward(ctx, dc_dev, a_dev, transpose_a, b_dev, transpose_b, nullptr, &db_only,
                            accumulate, accumulate);
          EXPECT_TRUE(testing::BitIdentical(da_only, da, "da alone"));
          EXPECT_TRUE(testing::BitIdentical(db_only, db, "db alone"));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmTest, ::testing::ValuesIn(GemmBackends()),
                         GemmBackendName());

// loss = <dc_probe, op(A) op(B)>; its gradients are exactly what GemmBackward returns for dc_probe.
TEST(GemmGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const int64_t m = 3, n = 4, k = 5;
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const Tensor dc = testing::Random({m, n}, DType::kF64, 3);  // [M, N]
  for (const bool transpose_a : kTransposes) {
    for (const bool transpose_b : kTransposes) {
      Tensor a = testing::Random(Stored(m, k, transpose_a), DType::kF64, 1);
      Tensor b = testing::Random(Stored(k, n, transpose_b), DType::kF64, 2);
      auto loss = [&] {
        Tensor c = Tensor::Empty({m, n}, DType::kF64);
        reference::Gemm(a, transpose_a, b, transpose_b, c);
        return testing::Dot(dc, c);
      };
      for (const bool fast : {false, true}) {
        SCOPED_TRACE(::testing::Message() << (fast ? "fast CPU" : "reference") << " transpose_a "
                                          << transpose_a << " transpose_b " << transpose_b);
        Tensor da = Tensor::Empty(a.shape(), DType::kF64),
               db = Tensor::Empty(b.shape(), DType::kF64);
        if (fast) {
          ops::GemmBackward(ctx, dc, a, transpose_a, b, transpose_b, &da, &db, false, false);
        } else {
          reference::GemmBackward(dc, a, transpose_a, b, transpose_b, &da, &db, false, false);
        }
        EXPECT_TRUE(testing::GradientMatches(loss, a, da, "da"));
        EXPECT_TRUE(testing::GradientMatches(loss, b, db, "db"));
      }
    }
  }
}

TEST(GemmDeathTest, ArgumentChecksNameTheShapes) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const Tensor a = Tensor::ZerosCpu({3, 4}, DType::kF32);  // [M, K]
  const Tensor b = Tensor::ZerosCpu({5, 6}, DType::kF32);  // K mismatch
  const Tensor b_ok = Tensor::ZerosCpu({4, 6}, DType::kF32);
  Tensor c = Tensor::ZerosCpu({3, 6}, DType::kF32);
  EXPECT_DEATH(
      ops::Gemm(ctx, a, false, b, false, c),
      "Gemm: inner dimensions differ: op\\(a\\) is \\[3, 4\\] and op\\(b\\) is \\[5, 6\\]");
  Tensor c_bad = Tensor::ZerosCpu({6, 3}, DType::kF32);
  EXPECT_DEATH(ops::Gemm(ctx, a, false, b_ok, false, c_bad),
               "Gemm: c is f32\\[6, 3\\]@cpu, expected \\[M, N\\] = \\[3, 6\\]");
  const Tensor b_f64 = Tensor::ZerosCpu({4, 6}, DType::kF64);
  EXPECT_DEATH(ops::Gemm(ctx, a, false, b_f64, false, c), "unsupported dtypes a f32, b f64, c f32");
  Tensor c_bf16 = Tensor::ZerosCpu({3, 6}, DType::kBF16);
  EXPECT_DEATH(ops::Gemm(ctx, a, false, b_ok, false, c_bf16),
               "unsupported dtypes a f32, b f32, c bf16");
  const Tensor a_3d = Tensor::ZerosCpu({1, 3, 4}, DType::kF32);
  EXPECT_DEATH(ops::Gemm(ctx, a_3d, false, b_ok, false, c), "Gemm: a must be 2-D");
  Tensor square = Tensor::ZerosCpu({4, 4}, DType::kF32);
  EXPECT_DEATH(ops::Gemm(ctx, square, false, square, false, square), "overlaps an input");
  const Tensor dc_f64 = Tensor::ZerosCpu({3, 6}, DType::kF64);
  Tensor da = Tensor::ZerosCpu({3, 4}, DType::kF32);
  EXPECT_DEATH(ops::GemmBackward(ctx, dc_f64, a, false, b_ok, false, &da, nullptr, false, false),
               "GemmBackward: dc f64\\[3, 6\\]@cpu must have the dtype of the inputs");
}

}  // namespace
}  // namespace kelvin
