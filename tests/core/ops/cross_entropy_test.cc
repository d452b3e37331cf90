// Softmax cross-entropy: forward, backward, fused and mean variants of the fast CPU and CUDA
// kernels against the naive reference (ignored targets, V below, above and not a multiple of
// kVocabChunk, logits of magnitude 80), gradients against f64 finite differences, and errors.
// N tokens, V vocabulary.
#include "core/ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/ops/reference/cross_entropy.h"
#include "core/ops/reference/values.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using ops::kIgnoreIndex;
using testing::Backend;

// targets [N] i32 drawn from [0, V), with kIgnoreIndex at the `ignored` rows.
Tensor MakeTargets(int64_t n, int64_t v, uint64_t seed, const std::vector<int64_t>& ignored) {
  Tensor targets = testing::RandomInts({n}, DType::kI32, seed, 0, v - 1);
  for (const int64_t row : ignored) targets.data<int32_t>()[row] = kIgnoreIndex;
  return targets;
}

// Copies of t (host) on `device`, in t's dtype: the in-place ops each get a fresh one.
Tensor Fresh(const Tensor& t, Device device) {
  return testing::ToDevice(testing::Cast(t, t.dtype()), device);
}

struct CrossEntropyCase {
  int64_t n, v;
  double logit_range;            // logits uniform in [-logit_range, logit_range)
  std::vector<int64_t> ignored;  // rows whose target is kIgnoreIndex
};
const std::vector<CrossEntropyCase> kCases = {
    {1, 1, 1.0, {}},                         // a single logit: loss 0, gradient 0
    {7, 160, 3.0, {4}},                      // V < kVocabChunk
    {5, 50000, 4.0, {0, 3}},                 // V > kVocabChunk, not a multiple of it
    {4, ops::kVocabChunk + 952, 80.0, {2}},  // large magnitudes: the online max must rescale
    {2, 2 * ops::kVocabChunk, 80.0, {}},     // a whole number of chunks
};

class CrossEntropyTest : public ::testing::TestWithParam<Backend> {};

TEST_P(CrossEntropyTest, AllVariantsMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const Device dev = backend.device;
  const DType acc = AccumDType(backend.dtype);
  const double tol = testing::RelTolerance(backend.dtype), acc_tol = testing::RelTolerance(acc);
  const double grad_scale = 0.37;
  uint64_t seed = 300;
  for (const auto& [n, v, range, ignored] : kCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " V=" << v << " range=" << range);
    const Tensor logits = testing::Random({n, v}, backend.dtype, ++seed, -range, range);  // [N, V]
    const Tensor targets = MakeTargets(n, v, ++seed, ignored);                            // [N]
    const Tensor logits64 = testing::Cast(logits, DType::kF64);
    const int64_t count = n - static_cast<int64_t>(ignored.size());

    Tensor loss_ref = Tensor::Empty({n}, DType::kF64), lse_ref = Tensor::Empty({n}, DType::kF64);
    reference::CrossEntropyForward(logits64, targets, loss_ref, lse_ref);
    Tensor grad_ref = testing::Cast(logits64, DType::kF64);  // [N, V]
    reference::CrossEntropyBackward(grad_ref, targets, lse_ref, grad_scale);
    Tensor mean_grad_ref = testing::Cast(logits64, DType::kF64);  // [N, V]
    reference::CrossEntropyBackward(mean_grad_ref, targets, lse_ref, 1.0 / count);
    double mean_ref = 0;
    for (const double l : reference::ToDoubles(loss_ref)) mean_ref += l / count;

    const Tensor targets_d = testing::ToDevice(targets, dev);
    EXPECT_EQ(ops::CountNonIgnored(ctx, targets_d), count);

    Tensor loss = Tensor::Empty({n}, acc, dev), lse = Tensor::Empty({n}, acc, dev);
    ops::CrossEntropyForward(ctx, testing::ToDevice(logits, dev), targets_d, loss, lse);
    EXPECT_TRUE(testing::AllClose(loss, loss_ref, acc_tol, "forward loss"));
    EXPECT_TRUE(testing::AllClose(lse, lse_ref, acc_tol, "forward lse"));

    Tensor grad = Fresh(logits, dev);
    ops::CrossEntropyBackward(ctx, grad, targets_d, lse, grad_scale);
    EXPECT_TRUE(testing::AllClose(grad, grad_ref, tol, "backward gradient"));

    Tensor fused = Fresh(logits, dev);
    Tensor fused_loss = Tensor::Empty({n}, acc, dev);
    ops::SoftmaxCrossEntropy(ctx, fused, targets_d, grad_scale, fused_loss);
    EXPECT_TRUE(testing::AllClose(fused_loss, loss_ref, acc_tol, "fused loss"));
    EXPECT_TRUE(testing::AllClose(fused, grad_ref, tol, "fused gradient"));

    Tensor mean_grad = Fresh(logits, dev);
    const double mean = ops::SoftmaxCrossEntropyMean(ctx, mean_grad, targets_d);
    EXPECT_NEAR(mean, mean_ref, acc_tol * std::abs(mean_ref)) << "mean loss";
    EXPECT_TRUE(testing::AllClose(mean_grad, mean_grad_ref, tol, "mean gradient"));
  }
}

TEST_P(CrossEntropyTest, MeanOverAnAllIgnoredBatchIsZeroWithZeroGradient) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const int64_t n = 3, v = 10;
  Tensor logits = testing::ToBackend(testing::Random({n, v}, DType::kF64, 1), backend);  // [N, V]
  const Tensor targets = testing::ToDevice(testing::Full({n}, DType::kI32, kIgnoreIndex),
                                           backend.device);  // [N]
  EXPECT_EQ(ops::CountNonIgnored(ctx, targets), 0);
  EXPECT_EQ(ops::SoftmaxCrossEntropyMean(ctx, logits, targets), 0.0);
  EXPECT_TRUE(testing::BitIdentical(logits, testing::Full({n, v}, backend.dtype, 0.0), "gradient"));
}

INSTANTIATE_TEST_SUITE_P(Backends, CrossEntropyTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// loss = grad_scale * sum_t loss_t(logits) (with the reference forward); its gradient is what the
// backward, fused and mean variants leave in the logits. One case inside a single chunk, one
// spanning two.
TEST(CrossEntropyGradient, ReferenceAndCpuMatchFiniteDifferences) {
  struct Shape2 {
    int64_t n, v;
    std::vector<int64_t> ignored;
  };
  const Context& ctx = testing::ContextFor(Device::Cpu());
  uint64_t seed = 400;
  for (const auto& [n, v, ignored] : {Shape2{4, 7, {1}}, Shape2{1, ops::kVocabChunk + 3, {}}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " V=" << v);
    Tensor logits = testing::Random({n, v}, DType::kF64, ++seed, -3, 3);  // [N, V]
    const Tensor targets = MakeTargets(n, v, ++seed, ignored);            // [N]
    const double mean_scale = 1.0 / static_cast<double>(n - static_cast<int64_t>(ignored.size()));
    auto total_loss = [&](double scale) {
      return [&, scale] {
        Tensor loss = Tensor::Empty({n}, DType::kF64), lse = Tensor::Empty({n}, DType::kF64);
        reference::CrossEntropyForward(logits, targets, loss, lse);
        double sum = 0;
        for (const double l : reference::ToDoubles(loss)) sum += l;
        return scale * sum;
      };
    };
    const double grad_scale = 0.37;
    Tensor loss = Tensor::Empty({n}, DType::kF64), lse = Tensor::Empty({n}, DType::kF64);

    Tensor ref_grad = testing::Cast(logits, DType::kF64);
    reference::CrossEntropyForward(logits, targets, loss, lse);
    reference::CrossEntropyBackward(ref_grad, targets, lse, grad_scale);
    EXPECT_TRUE(testing::GradientMatches(total_loss(grad_scale), logits, ref_grad, "reference"));

    Tensor fast_grad = testing::Cast(logits, DType::kF64);
    ops::CrossEntropyForward(ctx, logits, targets, loss, lse);
    ops::CrossEntropyBackward(ctx, fast_grad, targets, lse, grad_scale);
    EXPECT_TRUE(testing::GradientMatches(total_loss(grad_scale), logits, fast_grad, "backward"));

    Tensor fused_grad = testing::Cast(logits, DType::kF64);
    ops::SoftmaxCrossEntropy(ctx, fused_grad, targets, grad_scale, loss);
    EXPECT_TRUE(testing::GradientMatches(total_loss(grad_scale), logits, fused_grad, "fused"));

    Tensor mean_grad = testing::Cast(logits, DType::kF64);
    ops::SoftmaxCrossEntropyMean(ctx, mean_grad, targets);
    EXPECT_TRUE(testing::GradientMatches(total_loss(mean_scale), logits, mean_grad, "mean"));
  }
}

TEST(CrossEntropyErrors, BadArgumentsAbortWithTheirNames) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const int64_t n = 3, v = 5;
  const Tensor logits = testing::Random({n, v}, DType::kF32, 1);
  Tensor loss = Tensor::Empty({n}, DType::kF32), lse = Tensor::Empty({n}, DType::kF32);
  Tensor targets = MakeTargets(n, v, 2, {});
  targets.data<int32_t>()[1] = 7;
  EXPECT_DEATH(ops::CrossEntropyForward(ctx, logits, targets, loss, lse),
               "cross_entropy.targets\\[1\\] = 7 is outside \\[0, 5\\)");
  targets.data<int32_t>()[1] = -1;
  EXPECT_DEATH(ops::CrossEntropyForward(ctx, logits, targets, loss, lse),
               "cross_entropy.targets\\[1\\] = -1 is outside");
  const Tensor good_targets = MakeTargets(n, v, 2, {});
  Tensor lse_f64 = Tensor::Empty({n}, DType::kF64);
  EXPECT_DEATH(ops::CrossEntropyForward(ctx, logits, good_targets, loss, lse_f64),
               "cross_entropy.lse is f64\\[3\\]@cpu, expected dtype f32");
  Tensor short_loss = Tensor::Empty({n - 1}, DType::kF32);
  EXPECT_DEATH(ops::CrossEntropyForward(ctx, logits, good_targets, short_loss, lse),
               "cross_entropy.loss is f32\\[2\\]@cpu, expected shape \\[3\\]");
}

}  // namespace
}  // namespace kelvin
