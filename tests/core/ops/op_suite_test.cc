// One table of op cases run on every backend: each case's op against its naive f64 reference
// (on the same inputs, rounded to the backend's dtype) within the dtype's tolerance, outputs
// written inside guard elements that must stay untouched, and on cpu_f64 each backward with a
// probe loss against central finite differences of the reference forward (the embedding's
// backward, a scatter-add, is checked against its reference only).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/reference/embedding.h"
#include "core/ops/reference/gemm.h"
#include "core/ops/reference/rmsnorm.h"
#include "core/ops/reference/swiglu.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/swiglu.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/guarded_output.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;
using Tensors = std::vector<Tensor>;

// What a tensor of a case holds, and so its dtype on a backend.
enum class Role {
  kValue,  // the backend's dtype (activations, weights, their gradients)
  kAccum,  // AccumDType of it (statistics, accumulated parameter gradients)
  kIds,    // i32 in [lo, hi]
};

struct Arg {
  Shape shape;
  Role role = Role::kValue;
  double lo = -1, hi = 1;    // the uniform range of its random values
  bool accumulated = false;  // an output the op adds into (it starts random)
};

struct OpCase {
  std::string name;
  std::vector<Arg> inputs, outputs;
  // The op under test on ctx's device (the fast CPU kernel or CUDA) and the naive reference on
  // f64 host tensors, with one contract: inputs -> outputs.
  std::function<void(const Context& ctx, const Tensors& in, Tensors& out)> op;
  std::function<void(const Tensors& in, Tensors& out)> reference;
  // A backward: the probe loss <dy, forward(in)> of the reference forward, and the (input,
  // output) pairs where the output holds the loss's gradient with respect to the input.
  std::function<double(const Tensors& in)> probe_loss = {};
  std::vector<std::pair<int, int>> gradients = {};
};

DType DTypeOf(Role role, const Backend& backend) {
  if (role == Role::kIds) return DType::kI32;
  return role == Role::kAccum ? AccumDType(backend.dtype) : backend.dtype;
}

Tensor RandomArg(const Arg& arg, const Backend& backend, uint64_t seed) {
  if (arg.role == Role::kIds) {
    return testing::RandomInts(arg.shape, DType::kI32, seed, static_cast<int64_t>(arg.lo),
                               static_cast<int64_t>(arg.hi));
  }
  return testing::Random(arg.shape, DTypeOf(arg.role, backend), seed, arg.lo, arg.hi);
}

// f64 host copies (ids stay i32), what the reference reads.
Tensors InF64(const Tensors& host) {
  Tensors out;
  for (const Tensor& t : host) {
    out.push_back(t.dtype() == DType::kI32 ? t : testing::Cast(t, DType::kF64));
  }
  return out;
}

// --- the cases ---------------------------------------------------------------------------------

constexpr double kEps = 1e-5;
constexpr int64_t kVocabBegin = 40;  // an embedding shard of rows [40, 40 + V)

std::vector<OpCase> RmsNormCases(int64_t n, int64_t d) {
  const std::string shape = ShapeToString({n, d});
  OpCase forward{
      .name = "rmsnorm_forward " + shape,
      .inputs = {{.shape = {n, d}, .lo = -2, .hi = 2}, {.shape = {d}, .lo = 0.5, .hi = 1.5}},
      .outputs = {{.shape = {n, d}}, {.shape = {n}, .role = Role::kAccum}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::RmsNormForward(ctx, in[0], in[1], kEps, out[0], out[1]); },
      .reference =
          [](const Tensors& in, Tensors& out) {
            reference::RmsNormForward(in[0], in[1], kEps, out[0], out[1]);
          },
  };
  // rstd is an input of the backward: it must be x's, so the case computes it from x.
  OpCase backward{
      .name = "rmsnorm_backward " + shape,
      .inputs = {{.shape = {n, d}},
                 {.shape = {n, d}, .lo = -2, .hi = 2},
                 {.shape = {d}, .lo = 0.5, .hi = 1.5}},
      .outputs = {{.shape = {n, d}}, {.shape = {d}, .role = Role::kAccum, .accumulated = true}},
      .op =
          [](const Context& ctx, const Tensors& in, Tensors& out) {
            Tensor y = Tensor::Empty(in[1].shape(), in[1].dtype(), in[1].device());
            Tensor rstd = Tensor::Empty({in[1].dim(0)}, out[1].dtype(), in[1].device());
            ops::RmsNormForward(ctx, in[1], in[2], kEps, y, rstd);
            ops::RmsNormBackward(ctx, in[0], in[1], in[2], rstd, out[0], out[1]);
          },
      .reference =
          [](const Tensors& in, Tensors& out) {
            Tensor y = Tensor::Empty(in[1].shape(), DType::kF64);
            Tensor rstd = Tensor::Empty({in[1].dim(0)}, DType::kF64);
            reference::RmsNormForward(in[1], in[2], kEps, y, rstd);
            reference::RmsNormBackward(in[0], in[1], in[2], rstd, out[0], out[1]);
          },
      .probe_loss =
          [](const Tensors& in) {
            Tensor y = Tensor::Empty(in[1].shape(), DType::kF64);
            Tensor rstd = Tensor::Empty({in[1].dim(0)}, DType::kF64);
            reference::RmsNormForward(in[1], in[2], kEps, y, rstd);
            return testing::Dot(in[0], y);
          },
      .gradients = {{1, 0}, {2, 1}},
  };
  return {forward, backward};
}

std::vector<OpCase> SwiGluCases(int64_t n, int64_t f) {
  const std::string shape = ShapeToString({n, f});
  OpCase forward{
      .name = "swiglu_forward " + shape,
      .inputs = {{.shape = {n, f}, .lo = -4, .hi = 4}, {.shape = {n, f}}},
      .outputs = {{.shape = {n, f}}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::SwiGluForward(ctx, in[0], in[1], out[0]); },
      .reference = [](const Tensors& in,
                      Tensors& out) { reference::SwiGluForward(in[0], in[1], out[0]); },
  };
  OpCase backward{
      .name = "swiglu_backward " + shape,
      .inputs = {{.shape = {n, f}}, {.shape = {n, f}, .lo = -4, .hi = 4}, {.shape = {n, f}}},
      .outputs = {{.shape = {n, f}}, {.shape = {n, f}}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::SwiGluBackward(ctx, in[0], in[1], in[2], out[0], out[1]); },
      .reference =
          [](const Tensors& in, Tensors& out) {
            reference::SwiGluBackward(in[0], in[1], in[2], out[0], out[1]);
          },
      .probe_loss =
          [](const Tensors& in) {
            Tensor y = Tensor::Empty(in[1].shape(), DType::kF64);
            reference::SwiGluForward(in[1], in[2], y);
            return testing::Dot(in[0], y);
          },
      .gradients = {{1, 0}, {2, 1}},
  };
  return {forward, backward};
}

// Ids run past both ends of the shard, so rows outside it are zero (forward) and skipped
// (backward); each id repeats, so the backward sums.
std::vector<OpCase> EmbeddingCases(int64_t n, int64_t v, int64_t d) {
  const std::string shape = ShapeToString({n, v, d});
  const Arg ids{.shape = {n},
                .role = Role::kIds,
                .lo = static_cast<double>(kVocabBegin - 3),
                .hi = static_cast<double>(kVocabBegin + v + 2)};
  OpCase forward{
      .name = "embedding_forward " + shape,
      .inputs = {ids, {.shape = {v, d}}},
      .outputs = {{.shape = {n, d}}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::EmbeddingForward(ctx, in[0], in[1], kVocabBegin, out[0]); },
      .reference =
          [](const Tensors& in, Tensors& out) {
            reference::EmbeddingForward(in[0], in[1], kVocabBegin, out[0]);
          },
  };
  OpCase backward{
      .name = "embedding_backward " + shape,
      .inputs = {ids, {.shape = {n, d}}},
      .outputs = {{.shape = {v, d}, .role = Role::kAccum, .accumulated = true}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::EmbeddingBackward(ctx, in[0], in[1], kVocabBegin, out[0]); },
      .reference =
          [](const Tensors& in, Tensors& out) {
            reference::EmbeddingBackward(in[0], in[1], kVocabBegin, out[0]);
          },
  };
  return {forward, backward};
}

// c [M, N] = a [M, K] b^T (b [N, K], the layers' weight layout), written and accumulated.
std::vector<OpCase> GemmCases(int64_t m, int64_t n, int64_t k) {
  const std::string shape = ShapeToString({m, n, k});
  OpCase written{
      .name = "gemm_abt " + shape,
      .inputs = {{.shape = {m, k}}, {.shape = {n, k}}},
      .outputs = {{.shape = {m, n}}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::Gemm(ctx, in[0], false, in[1], true, out[0]); },
      .reference = [](const Tensors& in,
                      Tensors& out) { reference::Gemm(in[0], false, in[1], true, out[0]); },
  };
  OpCase accumulated{
      .name = "gemm_abt_accumulate " + shape,
      .inputs = {{.shape = {m, k}}, {.shape = {n, k}}},
      .outputs = {{.shape = {m, n}, .accumulated = true}},
      .op = [](const Context& ctx, const Tensors& in,
               Tensors& out) { ops::Gemm(ctx, in[0], false, in[1], true, out[0], 1.0f, 1.0f); },
      .reference =
          [](const Tensors& in, Tensors& out) {
            reference::Gemm(in[0], false, in[1], true, out[0], 1.0, 1.0);
          },
  };
  return {written, accumulated};
}

std::vector<OpCase> AllCases() {
  std::vector<OpCase> cases;
  for (const auto& family :
       {RmsNormCases(1, 7), RmsNormCases(37, 129), SwiGluCases(1, 1), SwiGluCases(45, 67),
        EmbeddingCases(1, 1, 1), EmbeddingCases(60, 17, 33), GemmCases(1, 1, 1),
        GemmCases(33, 47, 65)}) {
    cases.insert(cases.end(), family.begin(), family.end());
  }
  return cases;
}

// --- the runner --------------------------------------------------------------------------------

class OpSuiteTest : public ::testing::TestWithParam<Backend> {};

TEST_P(OpSuiteTest, EveryCaseMatchesItsReferenceInsideItsGuards) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  uint64_t seed = 1000;
  for (const OpCase& c : AllCases()) {
    SCOPED_TRACE(c.name);
    Tensors host_in, device_in;
    for (const Arg& arg : c.inputs) {
      host_in.push_back(RandomArg(arg, backend, ++seed));
      device_in.push_back(testing::ToDevice(host_in.back(), backend.device));
    }
    const Tensors reference_in = InF64(host_in);
    std::vector<testing::GuardedOutput> guarded;
    Tensors outputs, expected;
    for (const Arg& arg : c.outputs) {
      const DType dtype = DTypeOf(arg.role, backend);
      const Tensor start = arg.accumulated ? RandomArg(arg, backend, ++seed) : Tensor();
      guarded.emplace_back(arg.shape, dtype, backend.device, arg.accumulated ? &start : nullptr);
      expected.push_back(arg.accumulated ? testing::Cast(start, DType::kF64)
                                         : Tensor::Empty(arg.shape, DType::kF64));
    }
    for (testing::GuardedOutput& g : guarded) outputs.push_back(g.view());
    c.op(ctx, device_in, outputs);
    c.reference(reference_in, expected);
    for (size_t o = 0; o < outputs.size(); ++o) {
      const std::string what = "output " + std::to_string(o);
      EXPECT_TRUE(guarded[o].GuardsIntact(what));
      EXPECT_TRUE(testing::AllClose(outputs[o], expected[o],
                                    testing::RelTolerance(outputs[o].dtype()), what));
    }
  }
}

// The fast CPU backward in f64 against central finite differences of the reference forward; with
// the test above (every backend against the reference backward) this ties each backend's
// backward to the derivative of its forward.
TEST(OpSuite, EveryBackwardIsTheGradientOfItsForward) {
  const Backend f64{Device::Cpu(), DType::kF64};
  uint64_t seed = 5000;
  for (const OpCase& c : AllCases()) {
    if (!c.probe_loss) continue;
    SCOPED_TRACE(c.name);
    Tensors in;
    for (const Arg& arg : c.inputs) in.push_back(RandomArg(arg, f64, ++seed));
    Tensors out;
    for (const Arg& arg : c.outputs) {
      out.push_back(arg.accumulated ? testing::Full(arg.shape, DType::kF64, 0.0)
                                    : Tensor::Empty(arg.shape, DType::kF64));
    }
    c.op(Context::Cpu(), in, out);  // the fast CPU kernel in f64
    for (const auto& [input, output] : c.gradients) {
      EXPECT_TRUE(testing::GradientMatches([&] { return c.probe_loss(in); }, in[input], out[output],
                                           "input " + std::to_string(input)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OpSuiteTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

}  // namespace
}  // namespace kelvin
