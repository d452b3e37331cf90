// Process-grid layout validation (one clear message per problem) and the Megatron rank order,
// without MPI. The communicators themselves are tested under mpirun in mpi/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "parallel/process_grid.h"

namespace kelvin::parallel {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// TP2 x PP2 x DP2 on 8 ranks, a Llama-like shape that satisfies every rule.
GridSpec ValidSpec() {
  GridSpec spec;
  spec.world_size = 8;
  spec.tensor_parallel = 2;
  spec.data_parallel = 2;
  spec.pipeline_parallel = 2;
  spec.num_attention_heads = 32;
  spec.num_key_value_heads = 8;
  spec.num_layers = 32;
  spec.seq_length = 4096;
  spec.micro_batch_size = 1;
  spec.gradient_accumulation_steps = 8;
  spec.global_batch_size = 16;
  return spec;
}

std::string ErrorOf(const GridSpec& spec) {
  const absl::Status status = ValidateGridSpec(spec);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

TEST(GridValidationTest, AcceptsAValidLayout) {
  EXPECT_TRUE(ValidateGridSpec(ValidSpec()).ok()) << ValidateGridSpec(ValidSpec());
  GridSpec single;  // the defaults: one rank, one of everything
  EXPECT_TRUE(ValidateGridSpec(single).ok()) << ValidateGridSpec(single);
}

TEST(GridValidationTest, WorldSizeMustBeTheProduct) {
  GridSpec spec = ValidSpec();
  spec.world_size = 6;
  EXPECT_EQ(ErrorOf(spec),
            "invalid parallel layout: world size 6 does not equal tp 2 x cp 1 x dp 2 x pp 2 = 8: "
            "launch 8 processes, or change parallel.tensor_parallel/context_parallel/"
            "data_parallel/pipeline_parallel (data_parallel 0 derives it from the world size)");
}

TEST(GridValidationTest, CountsMustBePositive) {
  GridSpec spec = ValidSpec();
  spec.tensor_parallel = 0;
  spec.num_layers = -3;
  const std::string message = ErrorOf(spec);
  EXPECT_THAT(message, StartsWith("invalid parallel layout (2 problems):\n"));
  EXPECT_THAT(message, HasSubstr("\n  tensor_parallel=0: must be >= 1"));
  EXPECT_THAT(message, HasSubstr("\n  num_layers=-3: must be >= 1"));
}

TEST(GridValidationTest, HeadsMustSplitAcrossTensorParallel) {
  GridSpec spec = ValidSpec();
  spec.num_attention_heads = 33;
  EXPECT_THAT(ErrorOf(spec), HasSubstr("num_attention_heads=33 is not divisible by "
                                       "tensor_parallel=2: each tensor-parallel rank owns H / TP"));
}

TEST(GridValidationTest, KvHeadsSplitOrReplicate) {
  GridSpec spec = ValidSpec();
  spec.world_size = 32;
  spec.tensor_parallel = 8;
  spec.num_key_value_heads = 2;  // TP 8 = 4 x G: each KV head replicated on 4 ranks
  EXPECT_TRUE(ValidateGridSpec(spec).ok()) << ValidateGridSpec(spec);
  spec.num_key_value_heads = 8;  // one KV head per rank
  EXPECT_TRUE(ValidateGridSpec(spec).ok()) << ValidateGridSpec(spec);
  spec.num_attention_heads = 24;
  spec.num_key_value_heads = 12;  // 12 heads on 8 ranks: neither split nor replication
  EXPECT_THAT(ErrorOf(spec), HasSubstr("num_key_value_heads=12 is neither divisible by "
                                       "tensor_parallel=8 nor a divisor of it"));
}

TEST(GridValidationTest, LayersMustSplitAcrossPipelineChunks) {
  GridSpec spec = ValidSpec();
  spec.virtual_pipeline_stages = 3;
  EXPECT_THAT(ErrorOf(spec),
              HasSubstr("num_layers=32 is not divisible by pipeline_parallel 2 x "
                        "virtual_pipeline_stages 3 = 6: every model chunk holds the same number"));
  spec.virtual_pipeline_stages = 4;
  EXPECT_TRUE(ValidateGridSpec(spec).ok()) << ValidateGridSpec(spec);
}

TEST(GridValidationTest, SequenceParallelSplitsTheSequenceAcrossTensorParallel) {
  GridSpec spec = ValidSpec();
  spec.sequence_parallel = true;
  spec.seq_length = 4095;
  EXPECT_THAT(ErrorOf(spec), HasSubstr("seq_length=4095 / context_parallel=1 is not divisible by "
                                       "tensor_parallel=2 for sequence_parallel"));
  spec.sequence_parallel = false;  // without it any length goes
  EXPECT_TRUE(ValidateGridSpec(spec).ok()) << ValidateGridSpec(spec);
}

TEST(GridValidationTest, ContextParallelSplitsTheSequenceInto2CpChunks) {
  GridSpec spec = ValidSpec();
  spec.world_size = 16;
  spec.context_parallel = 2;
  spec.seq_length = 4094;  // even, but not a multiple of 2 x 2
  EXPECT_THAT(ErrorOf(spec), HasSubstr("seq_length=4094 is not divisible by 2 x context_parallel "
                                       "= 4 (context parallelism splits each sequence"));
  spec.seq_length = 4100;  // 4 x 1025: divisible by 2 CP, and 4100 / 2 = 2050 by TP 2
  spec.sequence_parallel = true;
  EXPECT_TRUE(ValidateGridSpec(spec).ok()) << ValidateGridSpec(spec);
  spec.tensor_parallel = 4;  // 2050 / 4 is not whole
  spec.world_size = 32;
  EXPECT_THAT(ErrorOf(spec), HasSubstr("seq_length=4100 / context_parallel=2 is not divisible by "
                                       "tensor_parallel=4"));
}

TEST(GridValidationTest, GlobalBatchIsMicroBatchTimesAccumulationTimesDataParallel) {
  GridSpec spec = ValidSpec();
  spec.global_batch_size = 32;
  EXPECT_THAT(ErrorOf(spec), HasSubstr("global_batch_size=32 does not equal micro_batch_size 1 x "
                                       "gradient_accumulation_steps 8 x data_parallel 2 = 16"));
}

TEST(GridValidationTest, ReportsEveryProblemAtOnce) {
  GridSpec spec = ValidSpec();
  spec.world_size = 7;
  spec.num_attention_heads = 31;
  spec.global_batch_size = 15;
  const std::string message = ErrorOf(spec);
  EXPECT_THAT(message, StartsWith("invalid parallel layout (3 problems):\n  world size 7"));
  EXPECT_THAT(message, HasSubstr("\n  num_attention_heads=31"));
  EXPECT_THAT(message, HasSubstr("\n  global_batch_size=15"));
}

TEST(GridValidationTest, HugeSizesDoNotOverflow) {
  GridSpec spec = ValidSpec();
  spec.tensor_parallel = 1 << 30;
  spec.context_parallel = 1 << 30;
  spec.data_parallel = 1 << 30;
  spec.pipeline_parallel = 1 << 30;
  EXPECT_THAT(ErrorOf(spec), HasSubstr("= (overflows int64)"));
}

TEST(GridCoordinatesTest, TensorParallelVariesFastestThenContextDataPipeline) {
  GridSpec spec;
  spec.world_size = 24;
  spec.tensor_parallel = 2;
  spec.context_parallel = 3;
  spec.data_parallel = 2;
  spec.pipeline_parallel = 2;
  // Megatron's order: rank = tp + TP * (cp + CP * (dp + DP * pp)).
  const GridCoordinates rank13 = CoordinatesOf(13, spec);  // 13 = 1 + 2 * (0 + 3 * (0 + 2 * 1))
  EXPECT_EQ(rank13.tp, 1);
  EXPECT_EQ(rank13.cp, 0);
  EXPECT_EQ(rank13.dp, 0);
  EXPECT_EQ(rank13.pp, 1);
  const GridCoordinates rank11 = CoordinatesOf(11, spec);  // 11 = 1 + 2 * (2 + 3 * (1 + 2 * 0))
  EXPECT_EQ(rank11.tp, 1);
  EXPECT_EQ(rank11.cp, 2);
  EXPECT_EQ(rank11.dp, 1);
  EXPECT_EQ(rank11.pp, 0);
  for (int rank = 0; rank < spec.world_size; ++rank) {
    EXPECT_EQ(WorldRankOf(CoordinatesOf(rank, spec), spec), rank);
  }
}

}  // namespace
}  // namespace kelvin::parallel
