// Decoding under tensor parallelism equals one rank's (run under mpirun; every rank of the world is
// one TP group): the logits of a batched prefill of two prompts of different lengths and of the
// tokens appended after it, in f64, with and without weight sharing, and in bf16 on CUDA. With 4
// ranks and 2 KV heads the KV heads are replicated (TP > G).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "models/llama/llama_decoder.h"
#include "parallel/comm/communicator_factory.h"
#include "tests/models/random_ssa_checkpoint.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

// A prefill of 5 and 3 tokens, then one token each twice, then sequence 1 alone: each call's
// logits of `sharded` (split over the TP ranks) against those of `whole` (one rank's model).
void ExpectSplitDecodingFollowsOneRank(const models::LlamaModel& whole,
                                       const models::LlamaModel& sharded, double rel_tol) {
  absl::StatusOr<models::LlamaDecoder> alone = models::LlamaDecoder::Create(whole, 16, 2);
  absl::StatusOr<models::LlamaDecoder> together = models::LlamaDecoder::Create(sharded, 16, 2);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE(together.ok()) << together.status();
  const std::vector<std::vector<std::vector<int32_t>>> calls = {
      {{1, 7, 3, 9, 2}, {4, 4, 11}}, {{5}, {0}}, {{8}, {6}}, {{}, {10, 2}}};
  for (size_t call = 0; call < calls.size(); ++call) {
    absl::StatusOr<Tensor> expected = alone->AppendBatch(calls[call]);
    absl::StatusOr<Tensor> got = together->AppendBatch(calls[call]);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->shape(), expected->shape()) << "call " << call;
    EXPECT_EQ(got->device(), expected->device()) << "call " << call;
    EXPECT_TRUE(
        testing::AllClose(*got, *expected, rel_tol, "logits of call " + std::to_string(call)));
  }
}

class LlamaDecoderTensorParallel : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaDecoderTensorParallel, EqualsOneRanksDecoding) {
  const bool weight_sharing = GetParam();
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(weight_sharing, true);
  const std::string dir = testing::WriteRandomSsaCheckpoint(
      config, ::testing::TempDir() + "/decoder_tp_mpi_" + (weight_sharing ? "shared" : "own"), 9);
  absl::StatusOr<std::unique_ptr<parallel::Communicator>> tp = parallel::CreateCommunicator(
      parallel::CommBackend::kMpi, MPI_COMM_WORLD, "tp", {}, Context::Cpu());
  ASSERT_TRUE(tp.ok()) << tp.status();
  // The row-parallel sums are taken in another order over the ranks.
  ExpectSplitDecodingFollowsOneRank(*testing::LoadF64(config, dir, {}),
                                    *testing::LoadF64(config, dir, {tp->get()}),
                                    testing::kF64ReducedRelTol);
}

INSTANTIATE_TEST_SUITE_P(WeightSharing, LlamaDecoderTensorParallel, ::testing::Bool());

// The same in bf16 on CUDA, the ranks sharing the GPU (MPI stages the device tensors through host
// memory): the row-parallel partial sums are rounded to bf16 before they are added, so the split
// follows one rank within the bf16 model tolerance. Skips without a GPU.
TEST(LlamaDecoderTensorParallelCuda, FollowsOneRanksBf16Decoding) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const Context& gpu = testing::ContextFor(Device::Cuda());
  const models::LlamaConfig config = testing::CudaSizedSsaLlamaConfig(true, true);
  const std::string dir =
      testing::WriteRandomSsaCheckpoint(config, ::testing::TempDir() + "/decoder_tp_mpi_cuda", 9);
  absl::StatusOr<std::unique_ptr<parallel::Communicator>> tp =
      parallel::CreateCommunicator(parallel::CommBackend::kMpi, MPI_COMM_WORLD, "tp", {}, gpu);
  ASSERT_TRUE(tp.ok()) << tp.status();
  ExpectSplitDecodingFollowsOneRank(
      *testing::LoadPlaced(config, dir, {}, DType::kBF16, gpu),
      *testing::LoadPlaced(config, dir, {tp->get()}, DType::kBF16, gpu),
      testing::kBf16ModelLogitsRelTol);
}

}  // namespace
}  // namespace kelvin
