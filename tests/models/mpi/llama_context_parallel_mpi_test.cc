// Context-parallel Llama+SSA equals its unsharded self (run under mpirun; every rank of the world
// is one CP group, each rank holding an early and a late chunk of T/(2 CP) tokens of each row):
// logits and parameter gradients in f64, with and without weight sharing.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>

#include "core/copy.h"
#include "models/llama/llama_model.h"
#include "parallel/comm/communicator_factory.h"
#include "tests/models/memory_plan_check.h"
#include "tests/models/random_ssa_checkpoint.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

// The rows of `t` [B*T, W] at this CP rank's tokens [2*B*Tc, W], written out from the layout the
// model documents (parallel::ContextSplit): chunk `rank` of every row, then chunk 2 CP - 1 - rank.
Tensor LocalRows(const Tensor& t, int64_t batch, int rank, int ranks) {
  const int64_t seq = t.dim(0) / batch, tc = seq / (2 * ranks), width = t.numel() / t.dim(0);
  Tensor rows = Tensor::Empty({2 * batch * tc, width}, t.dtype());
  int64_t r = 0;
  for (const int64_t chunk : {int64_t{rank}, int64_t{2 * ranks - 1 - rank}}) {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < tc; ++i, ++r) {
        const int64_t at = (b * seq + chunk * tc + i) * width;
        Tensor out = rows.Slice(r, r + 1).View({-1});
        CopyTensor(Context::Cpu(), t.View({-1}).Slice(at, at + width), out);
      }
    }
  }
  return rows;
}

// The same weights (non-zero temperatures), packed documents that cross the ranks' chunk
// boundaries, two rows (so the sequence collectives reorder): each rank's logits are the whole
// model's rows of its tokens, and after the backward of the same upstream gradient the ranks'
// parameter gradients sum to the whole model's, with and without weight sharing (the
// value-temperature source gathered too); each rank allocates what its memory plan says.
class LlamaContextParallel : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaContextParallel, EqualsTheUnshardedModel) {
  const bool weight_sharing = GetParam();
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(weight_sharing, true);
  const std::string dir = testing::WriteRandomSsaCheckpoint(
      config, ::testing::TempDir() + "/cp_mpi_" + (weight_sharing ? "shared" : "own"), 9);
  absl::StatusOr<std::unique_ptr<parallel::Communicator>> cp = parallel::CreateCommunicator(
      parallel::CommBackend::kMpi, MPI_COMM_WORLD, "cp", {}, Context::Cpu());
  ASSERT_TRUE(cp.ok()) << cp.status();
  const int rank = (*cp)->rank(), ranks = (*cp)->size();
  auto whole = testing::LoadF64(config, dir, {});
  models::LlamaParallelism parallelism;
  parallelism.cp = cp->get();
  auto sharded = testing::LoadF64(config, dir, parallelism);

  // Two rows of 8 tokens; the second packs documents of 3 and 5 tokens, across chunk boundaries.
  const int64_t batch = 2, seq = 8, n = batch * seq;
  const Tensor tokens = testing::RandomInts({batch, seq}, DType::kI32, 3, 0, 11);
  Tensor positions = Tensor::Empty({batch, seq}, DType::kI32);
  const int32_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 0, 1, 2, 3, 4};
  for (int i = 0; i < n; ++i) positions.data<int32_t>()[i] = ids[i];

  const Context ctx = Context::Cpu();
  Tensor& whole_logits = whole->Forward(ctx, tokens, positions);
  Tensor& shard_logits = sharded->Forward(ctx, tokens, positions);
  EXPECT_TRUE(testing::AllClose(shard_logits, LocalRows(whole_logits, batch, rank, ranks),
                                testing::kF64RelTol, "this rank's logits"));

  const Tensor upstream = testing::Random(whole_logits.shape(), DType::kF64, 4);  // dL/dlogits
  CopyTensor(ctx, upstream, whole_logits);
  CopyTensor(ctx, LocalRows(upstream, batch, rank, ranks), shard_logits);
  whole->Backward(ctx, whole_logits);
  sharded->Backward(ctx, shard_logits);
  sharded->FinishGradients();
  models::MemoryPlanOptions plan_options{batch, seq, DType::kF64, DType::kF64};
  plan_options.context_parallel = ranks;
  testing::ExpectPlanMatchesAllocations(config, plan_options, *sharded);
  for (const ParameterSet::Entry& e : sharded->parameters().entries()) {
    Tensor summed = e.grad;  // this rank's tokens' part, summed over the group
    (*cp)->AllReduce(summed, parallel::ReduceOp::kSum);
    EXPECT_TRUE(testing::AllClose(summed, whole->parameters().grad(e.name),
                                  testing::kF64ReducedRelTol, e.name));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(WeightSharing, LlamaContextParallel, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Shared" : "OwnProjection");
                         });

}  // namespace
}  // namespace kelvin
