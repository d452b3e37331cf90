// Pipeline-parallel Llama+SSA equals its unsplit self (run under mpirun; the world is one pipeline
// of P stages, V model chunks each): logits, parameter gradients and the gathered export match the
// whole model in f64.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/io/hf_checkpoint.h"
#include "core/ops/cross_entropy.h"
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

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int WorldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Eight layers (P V divides them for P = 2, 4 and V = 1, 2), tied embeddings.
models::LlamaConfig PipelineConfig() {
  models::LlamaConfig config = testing::TinySsaLlamaConfig(true, true);
  config.num_layers = 8;
  config.tie_word_embeddings = true;
  return config;
}

struct MicroBatch {
  Tensor tokens, positions, labels;  // [2, 6], [2, 6], [12]
};

// Two rows of 6 tokens; the second row packs two documents.
MicroBatch MakeMicroBatch(uint64_t seed) {
  MicroBatch b{testing::RandomInts({2, 6}, DType::kI32, seed, 0, 11),
               Tensor::Empty({2, 6}, DType::kI32),
               testing::RandomInts({12}, DType::kI32, seed + 1, 0, 11)};
  b.labels.data<int32_t>()[3] = ops::kIgnoreIndex;
  const int32_t ids[] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 12; ++i) b.positions.data<int32_t>()[i] = ids[i];
  return b;
}

// Tied embeddings, non-zero temperatures, two micro-batches pushed through the stages forward then
// backward by hand (the order all-forward-all-backward uses). The last stage's logits and every
// stage's parameter gradients (the tied embedding's summed between the first and last stage) match
// the whole model; the gradient-norm weights count every parameter once; the export gathered from
// the stages equals the whole model's; the stage's memory plan is what it allocated.
class LlamaPipelineParallel : public ::testing::TestWithParam<int> {};

TEST_P(LlamaPipelineParallel, EqualsTheUnsplitModel) {
  const int virtual_stages = GetParam();
  const int stages = WorldSize(), rank = WorldRank();
  const models::LlamaConfig config = PipelineConfig();
  const std::string dir = testing::WriteRandomSsaCheckpoint(
      config, absl::StrCat(::testing::TempDir(), "/pp_mpi_", virtual_stages), 11);
  absl::StatusOr<std::unique_ptr<parallel::Communicator>> pp = parallel::CreateCommunicator(
      parallel::CommBackend::kMpi, MPI_COMM_WORLD, "pp", {}, Context::Cpu());
  ASSERT_TRUE(pp.ok()) << pp.status();
  // The tied embeddings' group: the first and the last stage.
  const bool ends = rank == 0 || rank == stages - 1;
  MPI_Comm ends_comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, ends ? 0 : MPI_UNDEFINED, rank, &ends_comm);
  std::unique_ptr<parallel::Communicator> embedding;
  if (ends) {
    absl::StatusOr<std::unique_ptr<parallel::Communicator>> created = parallel::CreateCommunicator(
        parallel::CommBackend::kMpi, ends_comm, "embedding", {}, Context::Cpu());
    ASSERT_TRUE(created.ok()) << created.status();
    embedding = std::move(*created);
  }
  auto whole = testing::LoadF64(config, dir, {});
  models::LlamaParallelism parallelism;
  parallelism.pp = pp->get();
  parallelism.virtual_stages = virtual_stages;
  parallelism.embedding = embedding.get();
  auto staged = testing::LoadF64(config, dir, parallelism);
  const models::LlamaStageLayout& stage = staged->stage();
  const int next = (rank + 1) % stages, previous = (rank + stages - 1) % stages;

  const Context ctx = Context::Cpu();
  const std::vector<MicroBatch> batches = {MakeMicroBatch(21), MakeMicroBatch(31)};
  const double scale = 1.0 / 22;  // the labelled tokens of both
  // Forwards of both micro-batches, the virtual stages in order (each rank runs its chunks).
  for (int m = 0; m < 2; ++m) {
    const MicroBatch& b = batches[m];
    Tensor& whole_logits = whole->Forward(ctx, b.tokens, b.positions);
    Tensor whole_loss = Tensor::Empty({12}, DType::kF64);
    ops::SoftmaxCrossEntropy(ctx, whole_logits, b.labels, scale, whole_loss);
    whole->Backward(ctx, whole_logits);  // [whole_logits holds dlogits now]

    staged->BeginMicroBatch(m, b.tokens, b.positions);
    for (int c = 0; c < virtual_stages; ++c) {
      if (!stage.starts_model(c)) (*pp)->Recv(staged->ChunkInput(m, c), previous);
      Tensor& output = staged->ForwardChunk(ctx, m, c);
      if (!stage.ends_model(c)) {
        (*pp)->Send(output, next);
        continue;
      }
      Tensor loss = Tensor::Empty({12}, DType::kF64);
      ops::SoftmaxCrossEntropy(ctx, output, b.labels, scale, loss);
      EXPECT_TRUE(testing::AllClose(loss, whole_loss, testing::kF64RelTol, "token losses"));
      EXPECT_TRUE(testing::AllClose(output, whole_logits, testing::kF64RelTol, "dlogits"));
    }
  }
  // Backwards in micro-batch order, the virtual stages in reverse.
  for (int m = 0; m < 2; ++m) {
    for (int c = virtual_stages - 1; c >= 0; --c) {
      if (!stage.ends_model(c)) (*pp)->Recv(staged->ChunkGradient(m, c), next);
      staged->BackwardChunk(ctx, m, c);
      if (!stage.starts_model(c)) (*pp)->Send(staged->ChunkGradient(m, c), previous);
    }
    staged->EndMicroBatch(m);
  }
  staged->FinishGradients();
  models::MemoryPlanOptions plan_options{2, 6, DType::kF64, DType::kF64};
  plan_options.pipeline_parallel = stages;
  plan_options.pipeline_rank = rank;
  plan_options.virtual_stages = virtual_stages;
  plan_options.micro_batches_in_flight = 2;  // both forwards ran before the backwards
  testing::ExpectPlanMatchesAllocations(config, plan_options, *staged);
  int64_t counted = 0;
  for (const ParameterSet::Entry& e : staged->parameters().entries()) {
    EXPECT_TRUE(testing::AllClose(e.grad, whole->parameters().grad(e.name),
                                  testing::kF64ReducedRelTol, e.name))
        << "pipeline rank " << rank;
    if (staged->IsCanonicalCopy(e.name)) counted += e.value.numel();
  }
  int64_t counted_everywhere = 0;
  MPI_Allreduce(&counted, &counted_everywhere, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(counted_everywhere, whole->parameters().NumElements());

  // The export gathered on pipeline rank 0 is the whole model's.
  const std::string exported = absl::StrCat(dir, "_exported");
  ASSERT_TRUE(staged->ExportHf(exported).ok());
  if (rank == 0) {
    auto reloaded = testing::LoadF64(config, exported, {});
    for (const ParameterSet::Entry& e : whole->parameters().entries()) {
      EXPECT_TRUE(testing::BitIdentical(reloaded->parameters().value(e.name), e.value, e.name));
    }
    std::filesystem::remove_all(exported);
    std::filesystem::remove_all(dir);
  }
  if (ends_comm != MPI_COMM_NULL) MPI_Comm_free(&ends_comm);
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Chunks, LlamaPipelineParallel, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "ChunksPerStage");
                         });

}  // namespace
}  // namespace kelvin
