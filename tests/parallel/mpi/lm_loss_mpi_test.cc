// The LM loss with the vocabulary split over the world group (tensor parallelism): each rank's
// sum equals the whole vocabulary's cross-entropy, and its gradient slice the whole gradient's,
// on the host and (the logits staged through host memory) on a CUDA device. Runs under mpirun.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "core/ops/cross_entropy.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/loss/lm_loss.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/cross_entropy_reference.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::parallel {
namespace {

constexpr int64_t kTokens = 9, kVocab = 24;  // N, V (24 splits over 2, 4 and 8 ranks)
constexpr double kGradScale = 0.25;

// Labels [N] i32: tokens 2 and 6 ignored, the others over the whole vocabulary.
Tensor Labels() {
  const std::vector<int32_t> values = {3,  23, ops::kIgnoreIndex, 0, 17, 17, ops::kIgnoreIndex,
                                       11, 5};
  Tensor t = Tensor::Empty({kTokens}, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

class LmLossTensorParallelTest : public ::testing::TestWithParam<testing::Backend> {};

void CheckAgainstTheWholeVocabulary(const testing::Backend& c) {
  auto tp = CreateCommunicator(CommBackend::kMpi, MPI_COMM_WORLD, "tp", {}, Context::Cpu());
  ASSERT_TRUE(tp.ok()) << tp.status();
  const int64_t vocab = kVocab / (*tp)->size(), vocab_begin = (*tp)->rank() * vocab;
  const Tensor logits = testing::Random({kTokens, kVocab}, c.dtype, 41, -4, 4);  // every rank's
  const Tensor labels = Labels();
  const testing::CrossEntropyReference ref =
      testing::ReferenceCrossEntropy(logits, labels, kGradScale);

  // This rank's columns [vocab_begin, vocab_begin + V/TP) on the backend, replaced by the gradient.
  Tensor shard = testing::ToDevice(testing::SliceAlong(logits, 1, vocab_begin, vocab), c.device);
  const double sum = SoftmaxCrossEntropySum(testing::ContextFor(c.device), **tp, shard, labels,
                                            vocab_begin, kGradScale);
  EXPECT_NEAR(sum, ref.sum, testing::kF32RelTol * ref.sum);  // summed in f32 on every path
  EXPECT_TRUE(testing::AllClose(shard, testing::SliceAlong(ref.gradient, 1, vocab_begin, vocab),
                                testing::RelTolerance(c.dtype), "gradient slice"));
}

TEST_P(LmLossTensorParallelTest, EachSliceEqualsTheWholeVocabularysLoss) {
  CheckAgainstTheWholeVocabulary(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Host, LmLossTensorParallelTest,
                         ::testing::Values(testing::Backend{Device::Cpu(), DType::kF32}),
                         testing::BackendName());

class LmLossTensorParallelCudaTest : public ::testing::TestWithParam<testing::Backend> {};

TEST_P(LmLossTensorParallelCudaTest, EachSliceEqualsTheWholeVocabularysLoss) {
  KELVIN_SKIP_WITHOUT_CUDA(GetParam().device);
  CheckAgainstTheWholeVocabulary(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Device, LmLossTensorParallelCudaTest,
                         ::testing::ValuesIn(testing::CudaBackends()), testing::BackendName());

}  // namespace
}  // namespace kelvin::parallel
