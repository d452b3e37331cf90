// Gradient norm and clipping: sums of squares, global norms and clipping of the fast CPU and CUDA
// kernels against the f64 reference on tensors of odd sizes, the clip coefficient's edge cases,
// CPU determinism across thread counts, and argument errors.
#include "core/ops/grad_norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/reference/grad_norm.h"
#include "core/ops/reference/values.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

// Odd sizes: one element, 2-D, a realistic row, and one long enough for CUDA's grid-stride loop
// (over 1024 blocks x 256 threads x 8 elements) and several CPU blocks.
const std::vector<Shape> kShapes = {{1}, {71, 229}, {3, 4101}, {2200001}};

std::vector<Tensor> RandomTensors(DType dtype, uint64_t seed) {
  std::vector<Tensor> tensors;
  for (const Shape& shape : kShapes) tensors.push_back(testing::Random(shape, dtype, ++seed));
  return tensors;
}

double ReferenceSumOfSquares(const std::vector<Tensor>& tensors) {
  double sum = 0;
  for (const Tensor& t : tensors) sum += reference::SumOfSquares(t);
  return sum;
}

// Fresh copies of host tensors on `device` (the clipping tests scale them in place).
std::vector<Tensor> FreshCopies(const std::vector<Tensor>& tensors, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) {
    out.push_back(testing::ToDevice(testing::Cast(t, t.dtype()), device));
  }
  return out;
}

class GradNormTest : public ::testing::TestWithParam<Backend> {};

TEST_P(GradNormTest, NormsMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  // Sums are accumulated in f32 at least, whatever the input dtype.
  const double tol = testing::RelTolerance(AccumDType(backend.dtype));
  const std::vector<Tensor> host = RandomTensors(backend.dtype, 600);
  const std::vector<Tensor> device = FreshCopies(host, backend.device);
  for (size_t i = 0; i < host.size(); ++i) {
    const double expected = reference::SumOfSquares(host[i]);
    EXPECT_NEAR(ops::SumOfSquares(ctx, device[i]), expected, tol * expected) << host[i].ToString();
  }
  const double expected_sum = ReferenceSumOfSquares(host);
  EXPECT_NEAR(ops::SumOfSquares(ctx, device), expected_sum, tol * expected_sum);
  EXPECT_NEAR(ops::GlobalL2Norm(ctx, device), std::sqrt(expected_sum),
              tol * std::sqrt(expected_sum));
  EXPECT_EQ(ops::GlobalL2Norm(ctx, {}), 0.0);
}

TEST_P(GradNormTest, ClipScalesOnlyAboveMaxNorm) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const double tol = testing::RelTolerance(AccumDType(backend.dtype));
  const std::vector<Tensor> host = RandomTensors(backend.dtype, 700);
  const double norm = std::sqrt(ReferenceSumOfSquares(host));

  // Below the limit: nothing changes, bit for bit.
  std::vector<Tensor> unclipped = FreshCopies(host, backend.device);
  EXPECT_NEAR(ops::ClipByGlobalNorm(ctx, unclipped, 2 * norm), norm, tol * norm);
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(testing::BitIdentical(unclipped[i], host[i], "unclipped " + host[i].ToString()));
  }

  // Above it: every tensor is scaled by max_norm / (norm + 1e-6) and the pre-clip norm returned.
  const double max_norm = 0.25 * norm, coefficient = max_norm / (norm + 1e-6);
  std::vector<Tensor> clipped = FreshCopies(host, backend.device);
  EXPECT_NEAR(ops::ClipByGlobalNorm(ctx, clipped, max_norm), norm, tol * norm);
  for (size_t i = 0; i < host.size(); ++i) {
    std::vector<double> scaled = reference::ToDoubles(host[i]);
    for (double& x : scaled) x *= coefficient;
    Tensor expected = Tensor::Empty(host[i].shape(), DType::kF64);
    reference::FromDoubles(scaled, expected);
    EXPECT_TRUE(testing::AllClose(clipped[i], expected, testing::RelTolerance(backend.dtype),
                                  "clipped " + host[i].ToString()));
  }
  // The clipped tensors are rounded to their dtype, so their norm is only as exact as that.
  EXPECT_NEAR(ops::GlobalL2Norm(ctx, clipped), coefficient * norm,
              testing::RelTolerance(backend.dtype) * norm);
}

// Gradients near 1e20 (a diverging step): their squares overflow f32 but the norm does not, so
// every backend sums in f64 and returns the finite norm (an f32 sum gave inf, and the clip then
// zeroed every gradient).
TEST_P(GradNormTest, HugeGradientsGiveAFiniteNorm) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  // Scaled in f32 (CPU Scale has no bf16), then cast: 1e20 is inside bf16's (f32's) range.
  const Tensor unit = testing::Random({4099}, DType::kF32, 800);
  Tensor huge = Tensor::Empty(unit.shape(), DType::kF32);  // [4099] ~1e20 each
  ops::Scale(Context::Cpu(), unit, 1e20, huge);
  const Tensor host = testing::Cast(huge, backend.dtype);
  const double expected = std::sqrt(reference::SumOfSquares(host));
  ASSERT_TRUE(std::isfinite(expected));
  const std::vector<Tensor> device = FreshCopies({host}, backend.device);
  const double norm = ops::GlobalL2Norm(ctx, device);
  EXPECT_TRUE(std::isfinite(norm)) << norm;
  EXPECT_NEAR(norm, expected, testing::RelTolerance(AccumDType(backend.dtype)) * expected);
}

INSTANTIATE_TEST_SUITE_P(Backends, GradNormTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

TEST(GradNormCpu, Bf16SumOfSquaresMatchesReference) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const Tensor x = testing::Random({1000, 37}, DType::kBF16, 3);
  const double expected = reference::SumOfSquares(x);
  // Each bf16 square is exact in f64, so only the f64 summation order differs.
  EXPECT_NEAR(ops::SumOfSquares(ctx, x), expected, testing::kF64RelTol * expected);
}

TEST(GradNormCpu, SumOfSquaresIsBitIdenticalForAnyThreadCount) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const Tensor x = testing::Random({100003}, DType::kF32, 4);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one_thread = ops::SumOfSquares(ctx, x);
  omp_set_num_threads(3);
  const double three_threads = ops::SumOfSquares(ctx, x);
  omp_set_num_threads(saved_threads);
  EXPECT_EQ(one_thread, three_threads);
}

TEST(GradNormClipCoefficient, FollowsPyTorch) {
  EXPECT_DOUBLE_EQ(ops::ClipCoefficient(10.0, 1.0), 1.0 / (10.0 + 1e-6));
  EXPECT_EQ(ops::ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(ops::ClipCoefficient(0.0, 1.0), 1.0);
  EXPECT_EQ(ops::ClipCoefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0);
  EXPECT_TRUE(std::isnan(ops::ClipCoefficient(std::nan(""), 1.0)));
}

TEST(GradNormErrors, BadArgumentsAbortWithTheirNames) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  EXPECT_DEATH(ops::SumOfSquares(ctx, Tensor::ZerosCpu({3}, DType::kI32)),
               "SumOfSquares: tensor 0 is i32\\[3\\]@cpu, expected a float dtype");
  EXPECT_DEATH(
      ops::SumOfSquares(ctx, std::vector<Tensor>{Tensor::ZerosCpu({3}, DType::kF32), Tensor()}),
      "SumOfSquares: tensor 1 is undefined");
  std::vector<Tensor> grads = {testing::Random({4}, DType::kF32, 1)};
  EXPECT_DEATH(ops::ClipByGlobalNorm(ctx, grads, 0.0), "max_norm must be > 0");
}

}  // namespace
}  // namespace kelvin
