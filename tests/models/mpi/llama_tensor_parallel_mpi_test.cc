// Tensor-parallel Llama+SSA equals its unsharded self (run under mpirun; every rank of the world is
// one TP group): logits, the vocab-parallel loss and parameter gradients in f64, with and without
// sequence parallelism and weight sharing. With 4 ranks and 2 KV heads the KV heads are replicated
// (TP > G).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "core/copy.h"
#include "core/io/hf_checkpoint.h"
#include "core/ops/cross_entropy.h"
#include "models/llama/llama_model.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/loss/vocab_parallel_cross_entropy.h"
#include "tests/models/memory_plan_check.h"
#include "tests/models/random_ssa_checkpoint.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

struct Layout {
  bool sequence_parallel;
  bool weight_sharing;
};

// The same weights (one HF checkpoint, loaded sharded), non-zero temperatures, packed documents:
// the logits of each rank's vocabulary slice, the vocab-parallel loss and every parameter
// gradient's slice match the whole model, and each rank allocates what its memory plan says.
class LlamaTensorParallel : public ::testing::TestWithParam<Layout> {};

TEST_P(LlamaTensorParallel, EqualsTheUnshardedModel) {
  const Layout layout = GetParam();
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(layout.weight_sharing, true);
  const std::string dir = testing::WriteRandomSsaCheckpoint(
      config,
      ::testing::TempDir() + "/tp_mpi_" + (layout.weight_sharing ? "shared" : "own") +
          (layout.sequence_parallel ? "_sp" : ""),
      5);
  absl::StatusOr<std::unique_ptr<parallel::Communicator>> tp = parallel::CreateCommunicator(
      parallel::CommBackend::kMpi, MPI_COMM_WORLD, "tp", {}, Context::Cpu());
  ASSERT_TRUE(tp.ok()) << tp.status();
  auto whole = testing::LoadF64(config, dir, {});
  auto sharded = testing::LoadF64(config, dir, {tp->get(), layout.sequence_parallel});

  // Two rows of 6 tokens; the second packs two documents.
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 7, 0, 11);
  Tensor labels = testing::RandomInts({12}, DType::kI32, 8, 0, 11);
  labels.data<int32_t>()[4] = ops::kIgnoreIndex;
  Tensor positions = Tensor::Empty({2, 6}, DType::kI32);
  const int32_t ids[] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 12; ++i) positions.data<int32_t>()[i] = ids[i];

  const Context ctx = Context::Cpu();
  const int64_t vocab_begin = sharded->layout().vocab_begin, vocab = sharded->layout().vocab;
  Tensor& whole_logits = whole->Forward(ctx, tokens, positions);
  Tensor& shard_logits = sharded->Forward(ctx, tokens, positions);
  EXPECT_TRUE(testing::AllClose(shard_logits,
                                testing::SliceAlong(whole_logits, 1, vocab_begin, vocab),
                                testing::kF64RelTol, "logits slice"));

  // Evaluation: the vocab-parallel loss alone and the global argmax of every row.
  Tensor whole_eval = Tensor::Empty({12}, DType::kF64),
         shard_eval = Tensor::Empty({12}, DType::kF64);
  Tensor lse = Tensor::Empty({12}, DType::kF64);
  ops::CrossEntropyForward(ctx, whole_logits, labels, whole_eval, lse);
  parallel::VocabParallelCrossEntropyLoss(**tp, shard_logits, labels, vocab_begin, shard_eval);
  EXPECT_TRUE(testing::AllClose(shard_eval, whole_eval, testing::kF64RelTol, "eval losses"));
  Tensor predictions = Tensor::Empty({12}, DType::kI32);
  parallel::VocabParallelArgmax(**tp, shard_logits, vocab_begin, predictions);
  for (int64_t row = 0; row < 12; ++row) {
    const double* r = whole_logits.data<double>() + row * config.vocab_size;
    EXPECT_EQ(predictions.data<int32_t>()[row], std::max_element(r, r + config.vocab_size) - r)
        << "row " << row;
  }

  const double scale = 1.0 / 11;  // 11 labelled tokens
  Tensor whole_loss = Tensor::Empty({12}, DType::kF64),
         shard_loss = Tensor::Empty({12}, DType::kF64);
  ops::SoftmaxCrossEntropy(ctx, whole_logits, labels, scale, whole_loss);
  parallel::VocabParallelSoftmaxCrossEntropy(**tp, shard_logits, labels, vocab_begin, scale,
                                             shard_loss);
  EXPECT_TRUE(testing::AllClose(shard_loss, whole_loss, testing::kF64RelTol, "token losses"));
  EXPECT_TRUE(testing::AllClose(shard_logits,
                                testing::SliceAlong(whole_logits, 1, vocab_begin, vocab),
                                testing::kF64RelTol, "dlogits slice"));
  whole->Backward(ctx, whole_logits);
  sharded->Backward(ctx, shard_logits);
  sharded->FinishGradients();
  models::MemoryPlanOptions plan_options{2, 6, DType::kF64, DType::kF64};
  plan_options.tensor_parallel = (*tp)->size();
  plan_options.tensor_rank = (*tp)->rank();
  plan_options.sequence_parallel = layout.sequence_parallel;
  testing::ExpectPlanMatchesAllocations(config, plan_options, *sharded);
  for (const ParameterSet::Entry& e : sharded->parameters().entries()) {
    const models::ParameterShard shard = models::ShardOf(config, sharded->layout(), e.name);
    EXPECT_TRUE(testing::AllClose(
        e.grad,
        testing::SliceAlong(whole->parameters().grad(e.name), shard.axis, shard.begin, shard.count),
        testing::kF64ReducedRelTol, e.name));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (WorldRank() == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LlamaTensorParallel,
                         ::testing::Values(Layout{false, true}, Layout{true, true},
                                           Layout{false, false}, Layout{true, false}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(info.param.sequence_parallel ? "SequenceParallel"
                                                                           : "TensorOnly") +
                                  (info.param.weight_sharing ? "Shared" : "OwnProjection");
                         });

}  // namespace
}  // namespace kelvin
