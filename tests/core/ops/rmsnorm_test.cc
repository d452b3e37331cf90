// RMSNorm: fast CPU and CUDA against the naive reference on odd shapes, and the reference and fast
// CPU backward against f64 finite differences.
#include "core/ops/rmsnorm.h"

#include <gtest/gtest.h>

#include "core/ops/reference/rmsnorm.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

constexpr double kEps = 1e-5;

struct RmsNormCase {
  int64_t n, d;  // rows, features
  double eps;
};
// With a single feature dx = eps * w / (x^2 + eps)^1.5 is the difference of two nearly equal
// terms; Llama's tiny eps would measure only that cancellation, so the 1x1 case uses eps = 0.5.
constexpr RmsNormCase kCases[] = {{1, 1, 0.5}, {71, 229, kEps}, {3, 4096, kEps}, {130, 64, kEps}};

class RmsNormTest : public ::testing::TestWithParam<Backend> {};

TEST_P(RmsNormTest, ForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const DType acc = AccumDType(backend.dtype);
  const double tol = testing::RelTolerance(backend.dtype);
  uint64_t seed = 100;
  for (const auto [n, d, eps] : kCases) {
    SCOPED_TRACE(ShapeToString({n, d}));
    // Inputs rounded to the backend dtype; the reference sees exactly the same values in f64.
    const Tensor x = testing::Random({n, d}, backend.dtype, ++seed, -2, 2);  // [N, D]
    const Tensor w = testing::Random({d}, backend.dtype, ++seed, 0.5, 1.5);  // [D]
    const Tensor dy = testing::Random({n, d}, backend.dtype, ++seed);        // [N, D]
    const Tensor dw0 = testing::Random({d}, acc, ++seed);                    // [D]

    Tensor y_ref = Tensor::Empty({n, d}, DType::kF64), rstd_ref = Tensor::Empty({n}, DType::kF64);
    reference::RmsNormForward(testing::Cast(x, DType::kF64), testing::Cast(w, DType::kF64), eps,
                              y_ref, rstd_ref);
    Tensor dx_ref = Tensor::Empty({n, d}, DType::kF64), dw_ref = testing::Cast(dw0, DType::kF64);
    reference::RmsNormBackward(testing::Cast(dy, DType::kF64), testing::Cast(x, DType::kF64),
                               testing::Cast(w, DType::kF64), rstd_ref, dx_ref, dw_ref);

    const Tensor xd = testing::ToDevice(x, backend.device),
                 wd = testing::ToDevice(w, backend.device);
    Tensor y = Tensor::Empty({n, d}, backend.dtype, backend.device);
    Tensor rstd = Tensor::Empty({n}, acc, backend.device);
    ops::RmsNormForward(ctx, xd, wd, eps, y, rstd);
    EXPECT_TRUE(testing::AllClose(y, y_ref, tol, "y"));
    EXPECT_TRUE(testing::AllClose(rstd, rstd_ref, testing::RelTolerance(acc), "rstd"));

    Tensor dx = Tensor::Empty({n, d}, backend.dtype, backend.device);
    Tensor dw = testing::ToDevice(dw0, backend.device);
    ops::RmsNormBackward(ctx, testing::ToDevice(dy, backend.device), xd, wd, rstd, dx, dw);
    EXPECT_TRUE(testing::AllClose(dx, dx_ref, tol, "dx"));
    EXPECT_TRUE(testing::AllClose(dw, dw_ref, tol, "dweight (accumulated)"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RmsNormTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// loss = <dy, RmsNorm(x, w)>; its gradients are exactly what RmsNormBackward returns for dy.
TEST(RmsNormGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const int64_t n = 5, d = 13;
  Tensor x = testing::Random({n, d}, DType::kF64, 1, -2, 2);
  Tensor w = testing::Random({d}, DType::kF64, 2, 0.5, 1.5);
  const Tensor dy = testing::Random({n, d}, DType::kF64, 3);
  auto loss = [&] {
    Tensor y = Tensor::Empty({n, d}, DType::kF64), rstd = Tensor::Empty({n}, DType::kF64);
    reference::RmsNormForward(x, w, kEps, y, rstd);
    return testing::Dot(dy, y);
  };
  Tensor y = Tensor::Empty({n, d}, DType::kF64), rstd = Tensor::Empty({n}, DType::kF64);
  const Context& ctx = testing::ContextFor(Device::Cpu());
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor dx = Tensor::Empty({n, d}, DType::kF64), dw = Tensor::ZerosCpu({d}, DType::kF64);
    if (fast) {
      ops::RmsNormForward(ctx, x, w, kEps, y, rstd);
      ops::RmsNormBackward(ctx, dy, x, w, rstd, dx, dw);
    } else {
      reference::RmsNormForward(x, w, kEps, y, rstd);
      reference::RmsNormBackward(dy, x, w, rstd, dx, dw);
    }
    EXPECT_TRUE(testing::GradientMatches(loss, x, dx, "dx"));
    EXPECT_TRUE(testing::GradientMatches(loss, w, dw, "dweight"));
  }
}

}  // namespace
}  // namespace kelvin
