// Decoding under tensor parallelism equals one rank's (run under mpirun; every rank of the world is
// one TP group): the logits of a batched prefill of two prompts of different lengths and of the
// tokens appended after it, in f64, with and without weight sharing. With 4 ranks and 2 KV heads
// the KV heads are replicated (TP > G).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "models/llama/llama_decoder.h"
#include "parallel/comm/communicator_factory.h"
#include "tests/models/random_ssa_checkpoint.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/compare.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

class LlamaDecoderTensorParallel : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaDecoderTensorParallel, EqualsOneRanksDecoding) {
  const bool weight_sharing = GetParam();
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(weight_sharing, true);
  const std::string dir = testing::WriteRandomSsaCheckpoint(
      config, ::testing::TempDir() + "/decoder_tp_mpi_" + (weight_sharing ? "shared" : "own"), 9);
  absl::StatusOr<std::unique_ptr<parallel::Communicator>> tp = parallel::CreateCommunicator(
      parallel::CommBackend::kMpi, MPI_COMM_WORLD, "tp", {}, Context::Cpu());
  ASSERT_TRUE(tp.ok()) << tp.status();
  const auto whole = testing::LoadF64(config, dir, {});
  const auto sharded = testing::LoadF64(config, dir, {tp->get()});
  absl::StatusOr<models::LlamaDecoder> alone = models::LlamaDecoder::Create(*whole, 16, 2);
  absl::StatusOr<models::LlamaDecoder> together = models::LlamaDecoder::Create(*sharded, 16, 2);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE(together.ok()) << together.status();

  // A prefill of 5 and 3 tokens, then one token each twice, then sequence 1 alone.
  const std::vector<std::vector<std::vector<int32_t>>> calls = {
      {{1, 7, 3, 9, 2}, {4, 4, 11}}, {{5}, {0}}, {{8}, {6}}, {{}, {10, 2}}};
  for (size_t call = 0; call < calls.size(); ++call) {
    absl::StatusOr<Tensor> expected = alone->AppendBatch(calls[call]);
    absl::StatusOr<Tensor> got = together->AppendBatch(calls[call]);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->shape(), expected->shape()) << "call " << call;
    // The row-parallel sums are taken in another order over the ranks.
    EXPECT_TRUE(testing::AllClose(*got, *expected, testing::kF64ReducedRelTol,
                                  "logits of call " + std::to_string(call)));
  }
}

INSTANTIATE_TEST_SUITE_P(WeightSharing, LlamaDecoderTensorParallel, ::testing::Bool());

}  // namespace
}  // namespace kelvin
