// Group names in messages (the role and the members' world ranks, elided past 8 members) and the
// factory's option checks, which need no MPI processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "parallel/comm/communicator_factory.h"

namespace kelvin::parallel {
namespace {

TEST(GroupNameTest, ListsTheWorldRanks) {
  EXPECT_EQ(GroupName("tp", {0, 1}), "tp[0,1]");
  EXPECT_EQ(GroupName("pp", {3, 7, 11}), "pp[3,7,11]");
  EXPECT_EQ(GroupName("world", {0}), "world[0]");
}

TEST(GroupNameTest, ElidesLargeGroups) {
  std::vector<int> ranks(64);
  std::iota(ranks.begin(), ranks.end(), 0);
  EXPECT_EQ(GroupName("dp", ranks), "dp[0,1,2,3,4,5,6,7,...(64 ranks)]");
}

TEST(ReduceOpNameTest, NamesEachOp) {
  EXPECT_EQ(ReduceOpName(ReduceOp::kSum), "sum");
  EXPECT_EQ(ReduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_EQ(ReduceOpName(ReduceOp::kMax), "max");
}

TEST(CreateCommunicatorTest, RejectsANonPositiveTimeout) {
  CommunicatorOptions options;
  options.timeout_seconds = 0;
  const auto comm =
      CreateCommunicator(CommBackend::kMpi, MPI_COMM_NULL, "tp", options, Context::Cpu());
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(),
              ::testing::HasSubstr("communicator tp: timeout_seconds=0 must be > 0"));
}

}  // namespace
}  // namespace kelvin::parallel
