// SwiGLU: fast CPU and CUDA against the naive reference (gate and up as views of one buffer, in
// place), and the reference and fast CPU backward against f64 finite differences. N rows, F ffn
// features.
#include "core/ops/swiglu.h"

#include <gtest/gtest.h>

#include "core/copy.h"
#include "core/ops/reference/swiglu.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

struct SwiGluCase {
  int64_t n, f;  // rows, ffn features
};
// F = 14336 is Llama-3-8B's intermediate size; 71 x 229 is not a multiple of any vector width.
constexpr SwiGluCase kCases[] = {{1, 1}, {71, 229}, {2, 14336}, {130, 64}};

class SwiGluTest : public ::testing::TestWithParam<Backend> {};

TEST_P(SwiGluTest, ForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const double tol = testing::RelTolerance(backend.dtype);
  uint64_t seed = 200;
  for (const auto [n, f] : kCases) {
    SCOPED_TRACE(ShapeToString({n, f}));
    // Inputs rounded to the backend dtype; the reference sees exactly the same values in f64.
    // gate spans [-8, 8]: both tails of the sigmoid and the zero of d silu / dg near -1.28.
    const Tensor gate = testing::Random({n, f}, backend.dtype, ++seed, -8, 8);  // [N, F]
    const Tensor up = testing::Random({n, f}, backend.dtype, ++seed, -2, 2);    // [N, F]
    const Tensor dout = testing::Random({n, f}, backend.dtype, ++seed);         // [N, F]

    Tensor out_ref = Tensor::Empty({n, f}, DType::kF64);
    Tensor dgate_ref = Tensor::Empty({n, f}, DType::kF64),
           dup_ref = Tensor::Empty({n, f}, DType::kF64);
    reference::SwiGluForward(testing::Cast(gate, DType::kF64), testing::Cast(up, DType::kF64),
                             out_ref);
    reference::SwiGluBackward(testing::Cast(dout, DType::kF64), testing::Cast(gate, DType::kF64),
                              testing::Cast(up, DType::kF64), dgate_ref, dup_ref);

    // gate and up as the two halves of one fused [2N, F] buffer, as a fused gate-up GEMM leaves
    // them.
    Tensor gate_up = Tensor::Empty({2 * n, f}, backend.dtype, backend.device);
    Tensor gate_d = gate_up.Slice(0, n), up_d = gate_up.Slice(n, 2 * n);
    CopyTensor(ctx, gate, gate_d);
    CopyTensor(ctx, up, up_d);
    const Tensor dout_d = testing::ToDevice(dout, backend.device);

    Tensor out = Tensor::Empty({n, f}, backend.dtype, backend.device);
    ops::SwiGluForward(ctx, gate_d, up_d, out);
    EXPECT_TRUE(testing::AllClose(out, out_ref, tol, "out"));
    Tensor dgate = Tensor::Empty({n, f}, backend.dtype, backend.device);
    Tensor dup = Tensor::Empty({n, f}, backend.dtype, backend.device);
    ops::SwiGluBackward(ctx, dout_d, gate_d, up_d, dgate, dup);
    EXPECT_TRUE(testing::AllClose(dgate, dgate_ref, tol, "dgate"));
    EXPECT_TRUE(testing::AllClose(dup, dup_ref, tol, "dup"));

    // In place: out over gate; then dgate over gate and dup over dout. Same bits.
    Tensor gate_copy = CopyToDevice(ctx, gate, backend.device);
    ops::SwiGluForward(ctx, gate_copy, up_d, gate_copy);
    EXPECT_TRUE(testing::BitIdentical(gate_copy, out, "out computed over gate"));
    gate_copy = CopyToDevice(ctx, gate, backend.device);
    Tensor dout_copy = CopyToDevice(ctx, dout, backend.device);
    ops::SwiGluBackward(ctx, dout_copy, gate_copy, up_d, gate_copy, dout_copy);
    EXPECT_TRUE(testing::BitIdentical(gate_copy, dgate, "dgate computed over gate"));
    EXPECT_TRUE(testing::BitIdentical(dout_copy, dup, "dup computed over dout"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SwiGluTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// loss = <dout, SwiGlu(gate, up)>; its gradients are exactly what SwiGluBackward returns for dout.
TEST(SwiGluGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const int64_t n = 3, f = 7;
  Tensor gate = testing::Random({n, f}, DType::kF64, 1, -5, 5);
  Tensor up = testing::Random({n, f}, DType::kF64, 2, -2, 2);
  const Tensor dout = testing::Random({n, f}, DType::kF64, 3);
  auto loss = [&] {
    Tensor out = Tensor::Empty({n, f}, DType::kF64);
    reference::SwiGluForward(gate, up, out);
    return testing::Dot(dout, out);
  };
  const Context& ctx = testing::ContextFor(Device::Cpu());
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor dgate = Tensor::Empty({n, f}, DType::kF64), dup = Tensor::Empty({n, f}, DType::kF64);
    if (fast) {
      ops::SwiGluBackward(ctx, dout, gate, up, dgate, dup);
    } else {
      reference::SwiGluBackward(dout, gate, up, dgate, dup);
    }
    EXPECT_TRUE(testing::GradientMatches(loss, gate, dgate, "dgate"));
    EXPECT_TRUE(testing::GradientMatches(loss, up, dup, "dup"));
  }
}

}  // namespace
}  // namespace kelvin
