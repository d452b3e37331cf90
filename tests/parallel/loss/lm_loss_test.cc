// The LM loss without tensor parallelism, on the host and on a CUDA device (f32, bf16), against the
// f64 reference: the cross-entropy sum, the gradient written in place (zero on ignored rows), the
// evaluation's sum with the logits left as they were and its argmax, scoring's per-token losses;
// and the token accuracy count.
// The tensor-parallel paths need several ranks: tests/models/mpi/ and tests/training/mpi/.
#include "parallel/loss/lm_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/ops/cross_entropy.h"
#include "parallel/comm/self_communicator.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/cross_entropy_reference.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::parallel {
namespace {

constexpr int64_t kTokens = 9, kVocab = 37;  // N, V
constexpr double kGradScale = 0.25;

Tensor I32(const std::vector<int32_t>& values) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// Labels [N] i32: token 2 and 6 ignored, the others spread over the vocabulary.
Tensor Labels() {
  constexpr int32_t kNo = ops::kIgnoreIndex;
  return I32({3, 36, kNo, 0, 17, 17, kNo, 29, 5});
}

// The host kernels take f32 logits; a device takes f32 or bf16.
std::vector<testing::Backend> LossBackends() {
  return {
      {Device::Cpu(), DType::kF32}, {Device::Cuda(), DType::kF32}, {Device::Cuda(), DType::kBF16}};
}

class LmLossTest : public ::testing::TestWithParam<testing::Backend> {};

TEST_P(LmLossTest, SumAndInPlaceGradientMatchTheReference) {
  const testing::Backend c = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(c.device);
  const Context& ctx = testing::ContextFor(c.device);
  const Tensor logits = testing::Random({kTokens, kVocab}, c.dtype, 41, -4, 4);  // [N, V]
  const Tensor labels = Labels();                                                // [N] host
  const testing::CrossEntropyReference ref =
      testing::ReferenceCrossEntropy(logits, labels, kGradScale);

  Tensor in_place = testing::ToDevice(logits, c.device);  // [N, V], becomes the gradient
  SelfCommunicator whole_vocabulary("tp", 0, ctx);
  const double sum = SoftmaxCrossEntropySum(ctx, whole_vocabulary, in_place, labels, 0, kGradScale);
  EXPECT_NEAR(sum, ref.sum, testing::kF32RelTol * ref.sum);  // summed in f32 on every path
  EXPECT_TRUE(
      testing::AllClose(in_place, ref.gradient, testing::RelTolerance(c.dtype), "gradient"));
  const Tensor gradient = testing::Cast(testing::ToHost(in_place), DType::kF64);
  for (const int64_t ignored : {2, 6}) {
    for (int64_t j = 0; j < kVocab; ++j) {
      ASSERT_EQ(gradient.data<double>()[ignored * kVocab + j], 0.0) << "row " << ignored;
    }
  }
}

TEST_P(LmLossTest, EvaluationSumsWithoutChangingTheLogitsAndFindsTheArgmax) {
  const testing::Backend c = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(c.device);
  const Context& ctx = testing::ContextFor(c.device);
  const Tensor logits = testing::Random({kTokens, kVocab}, c.dtype, 43, -4, 4);  // [N, V]
  const Tensor labels = Labels();
  const double sum_ref = testing::ReferenceCrossEntropy(logits, labels, 1.0).sum;

  const Tensor on_device = testing::ToDevice(logits, c.device);
  Tensor predictions = Tensor::Empty({kTokens}, DType::kI32);  // [N] host
  SelfCommunicator whole_vocabulary("tp", 0, ctx);
  const double sum = CrossEntropySum(ctx, whole_vocabulary, on_device, labels, 0, &predictions);
  EXPECT_NEAR(sum, sum_ref, testing::kF32RelTol * sum_ref);
  EXPECT_TRUE(testing::BitIdentical(testing::ToHost(on_device), logits, "logits"));
  const Tensor values = testing::Cast(logits, DType::kF64);
  for (int64_t i = 0; i < kTokens; ++i) {
    const double* row = values.data<double>() + i * kVocab;
    const int32_t best = predictions.data<int32_t>()[i];
    ASSERT_GE(best, 0);
    ASSERT_LT(best, kVocab);
    for (int64_t j = 0; j < kVocab; ++j) EXPECT_LE(row[j], row[best]) << "token " << i;
  }
}

// Scoring's per-token losses: each row's the reference's for that row alone (0 where ignored), in
// f32 from f32 or bf16 logits, in f64 from f64 host logits, the logits left as they were.
TEST_P(LmLossTest, TokenLossesMatchTheReferenceRowByRow) {
  const testing::Backend c = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(c.device);
  const Context& ctx = testing::ContextFor(c.device);
  const Tensor labels = Labels();
  std::vector<DType> dtypes = {c.dtype};
  if (c.device.is_cpu()) dtypes.push_back(DType::kF64);
  for (const DType dtype : dtypes) {
    const Tensor logits = testing::Random({kTokens, kVocab}, dtype, 47, -4, 4);  // [N, V]
    const Tensor on_device = testing::ToDevice(logits, c.device);
    SelfCommunicator whole_vocabulary("tp", 0, ctx);
    const Tensor losses = CrossEntropyLosses(ctx, whole_vocabulary, on_device, labels, 0);  // [N]
    ASSERT_TRUE(losses.is_cpu());
    ASSERT_EQ(losses.dtype(), dtype == DType::kF64 ? DType::kF64 : DType::kF32);
    ASSERT_EQ(losses.numel(), kTokens);
    const Tensor wide = testing::Cast(losses, DType::kF64);
    for (int64_t i = 0; i < kTokens; ++i) {
      const double want =
          testing::ReferenceCrossEntropy(logits.Slice(i, i + 1), labels.Slice(i, i + 1), 1.0).sum;
      const double tolerance = dtype == DType::kF64 ? testing::kF64RelTol : testing::kF32RelTol;
      EXPECT_NEAR(wide.data<double>()[i], want, tolerance * std::max(1.0, want))
          << "token " << i << " " << DTypeName(dtype);
    }
    EXPECT_EQ(wide.data<double>()[2], 0.0);  // ignored
    EXPECT_TRUE(testing::BitIdentical(testing::ToHost(on_device), logits, "logits"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, LmLossTest, ::testing::ValuesIn(LossBackends()),
                         testing::BackendName());

TEST(CountCorrectPredictions, CountsLabelledTokensPredictedRight) {
  constexpr int32_t kNo = ops::kIgnoreIndex;
  const Tensor labels = I32({5, 7, kNo, 9, kNo, 3});
  const Tensor predictions = I32({5, 8, 4, 9, kNo, 2});
  EXPECT_EQ(CountCorrectPredictions(labels, predictions), 2);  // tokens 0 and 3
  EXPECT_EQ(CountCorrectPredictions(labels, labels), 4);       // every labelled token
}

}  // namespace
}  // namespace kelvin::parallel
