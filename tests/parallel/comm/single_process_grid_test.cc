// The one-process grid: every group is the process alone, its collectives are identities or copies
// that check their counts, point-to-point aborts (no peer), and the layout is validated as for
// any other world size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "parallel/comm/self_communicator.h"
#include "parallel/process_grid.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"

namespace kelvin::parallel {
namespace {

using ::testing::HasSubstr;

GridSpec OneProcessSpec() {
  GridSpec spec;
  spec.num_attention_heads = 4;
  spec.num_key_value_heads = 2;
  spec.num_layers = 2;
  spec.seq_length = 16;
  spec.micro_batch_size = 2;
  spec.gradient_accumulation_steps = 3;
  spec.global_batch_size = 6;
  return spec;
}

TEST(SelfCommunicatorTest, ReductionsAndBroadcastLeaveTheTensorAsItIs) {
  SelfCommunicator self("dp", 0, Context::Cpu());
  EXPECT_EQ(self.size(), 1);
  EXPECT_EQ(self.rank(), 0);
  EXPECT_EQ(self.name(), "dp[0]");
  const Tensor original = testing::Random({3, 4}, DType::kF32, 1);
  Tensor t = testing::Cast(original, DType::kF32);  // a copy
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    self.AllReduce(t, op);
    EXPECT_TRUE(testing::BitIdentical(t, original, std::string(ReduceOpName(op))));
  }
  self.Broadcast(t, 0);
  EXPECT_TRUE(testing::BitIdentical(t, original, "broadcast"));
  EXPECT_EQ(self.AllReduceScalar(2.5, ReduceOp::kSum), 2.5);
  const absl::Status failed = absl::DataLossError("disk full");
  EXPECT_EQ(AgreeOnStatus(self, failed, "writing"), failed);
  EXPECT_TRUE(AgreeOnStatus(self, absl::OkStatus(), "writing").ok());
}

TEST(SelfCommunicatorTest, GathersScattersAndAllToAllCopyTheInput) {
  SelfCommunicator self("tp", 0, Context::Cpu());
  const Tensor input = testing::Random({6}, DType::kBF16, 2);
  Tensor gathered = Tensor::ZerosCpu({6}, DType::kBF16);
  self.AllGather(input, gathered);
  EXPECT_TRUE(testing::BitIdentical(gathered, input, "all-gather"));
  Tensor scattered = Tensor::ZerosCpu({2, 3}, DType::kBF16);  // shapes are free, counts are not
  self.ReduceScatter(input, scattered, ReduceOp::kSum);
  EXPECT_TRUE(testing::BitIdentical(scattered.View({-1}), input, "reduce-scatter"));
  Tensor exchanged = Tensor::ZerosCpu({6}, DType::kBF16);
  self.AllToAll(input, exchanged);
  EXPECT_TRUE(testing::BitIdentical(exchanged, input, "all-to-all"));
  Tensor uneven = Tensor::ZerosCpu({6}, DType::kBF16);
  self.AllGatherUneven(input, uneven, {6});
  EXPECT_TRUE(testing::BitIdentical(uneven, input, "uneven all-gather"));
}

TEST(SelfCommunicatorDeathTest, WrongCountsAndPeersAbortWithTheGroupsName) {
  SelfCommunicator self("pp", 0, Context::Cpu());
  const Tensor input = Tensor::ZerosCpu({4}, DType::kF32);
  Tensor small = Tensor::ZerosCpu({3}, DType::kF32);
  EXPECT_DEATH(self.AllGather(input, small), "pp\\[0\\]: AllGather of 4 f32 elements into 3 f32");
  EXPECT_DEATH(self.AllGatherUneven(input, small, {4}),
               "AllGatherUneven on pp\\[0\\] between .* and this rank's .* with 1 counts "
               "summing to 4");
  EXPECT_DEATH(self.Send(input, 1),
               "pp\\[0\\]: Send to group rank 1, but the group has one member");
  EXPECT_DEATH(self.Recv(small, 0), "pp\\[0\\]: Recv from group rank 0, but the group has one");
  EXPECT_DEATH(self.Broadcast(small, 1), "pp\\[0\\]: Broadcast from group rank 1");
  Tensor ints = Tensor::ZerosCpu({2}, DType::kI32);
  EXPECT_DEATH(self.AllReduce(ints, ReduceOp::kAvg), "avg needs a floating dtype, not i32");
}

TEST(SingleProcessGridTest, EveryGroupIsTheProcessAlone) {
  absl::StatusOr<std::unique_ptr<ProcessGrid>> grid =
      ProcessGrid::Single(OneProcessSpec(), Context::Cpu());
  ASSERT_TRUE(grid.ok()) << grid.status();
  ProcessGrid& g = **grid;
  EXPECT_EQ(g.world_rank(), 0);
  EXPECT_TRUE(g.is_first_stage());
  EXPECT_TRUE(g.is_last_stage());
  EXPECT_EQ(g.spec().gradient_accumulation_steps, 3);
  for (Communicator* group : {&g.world(), &g.tp(), &g.cp(), &g.dp(), &g.pp(), &g.dp_cp()}) {
    EXPECT_EQ(group->size(), 1) << group->name();
    EXPECT_EQ(group->rank(), 0) << group->name();
  }
  EXPECT_EQ(g.tp().name(), "tp[0]");
  ASSERT_NE(g.embedding(), nullptr);  // the first stage is the last
  EXPECT_EQ(g.embedding()->size(), 1);
}

TEST(SingleProcessGridTest, RefusesALayoutForMoreProcesses) {
  GridSpec two = OneProcessSpec();
  two.world_size = 2;
  two.data_parallel = 2;
  const auto wrong_world = ProcessGrid::Single(two, Context::Cpu());
  ASSERT_FALSE(wrong_world.ok());
  EXPECT_THAT(wrong_world.status().message(),
              HasSubstr("the layout is for world size 2, but this is one process"));
  GridSpec batch = OneProcessSpec();
  batch.global_batch_size = 7;
  const auto bad_batch = ProcessGrid::Single(batch, Context::Cpu());
  ASSERT_FALSE(bad_batch.ok());
  EXPECT_THAT(bad_batch.status().message(), HasSubstr("invalid parallel layout"));
}

}  // namespace
}  // namespace kelvin::parallel
