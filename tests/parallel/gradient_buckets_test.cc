// GradientBuckets on one process: how units join into buckets and their stretches merge, and when
// each bucket's collectives start (as soon as its units finished, in bucket order, with overlap;
// only at Wait without), recorded by a communicator that sums nothing.
#include "parallel/gradient_buckets.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/parallel/bucket_testing.h"

namespace kelvin::parallel {
namespace {

using ::kelvin::parallel::testing::kTwoLayerUnits;
using ::kelvin::parallel::testing::RecordingCommunicator;
using ::kelvin::parallel::testing::TwoLayers;

TEST(PlanGradientBucketsTest, JoinsUnitsUntilABucketIsFullAndMergesAdjacentStretches) {
  std::unique_ptr<ParameterSet> params = TwoLayers();
  const std::vector<GradientBucket> per_layer = PlanGradientBuckets(*params, kTwoLayerUnits, 20);
  ASSERT_EQ(per_layer.size(), 3u);  // 20, 25 and 3 elements
  EXPECT_EQ(per_layer[0].units, (std::vector<int>{0}));
  EXPECT_EQ(per_layer[0].elements, 20);
  ASSERT_EQ(per_layer[0].stretches.size(), 2u);
  EXPECT_EQ(per_layer[0].stretches[0].group, ParamGroup::kDecay);
  EXPECT_EQ(per_layer[0].stretches[0].begin, 20);
  EXPECT_EQ(per_layer[0].stretches[0].end, 35);
  EXPECT_EQ(per_layer[0].stretches[1].group, ParamGroup::kNoDecay);
  EXPECT_EQ(per_layer[0].stretches[1].begin, 5);
  EXPECT_EQ(per_layer[2].elements, 3);

  const std::vector<GradientBucket> one = PlanGradientBuckets(*params, kTwoLayerUnits, 1000);
  ASSERT_EQ(one.size(), 1u);  // the last bucket takes what is left
  EXPECT_EQ(one[0].units, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(one[0].stretches.size(), 3u);  // each group's two layers merged into one stretch
  EXPECT_EQ(one[0].stretches[0].begin, 0);
  EXPECT_EQ(one[0].stretches[0].end, 35);
  EXPECT_EQ(one[0].stretches[1].end, 10);
  EXPECT_EQ(one[0].stretches[2].end, 3);
}

TEST(SplitOverShardsTest, CountsEachShardsPartOfAStretchAndWhereThisRanksPartStarts) {
  // Shards of 10 over 3 ranks; the stretch [7, 23) covers 3 of shard 0, all of 1 and 3 of 2.
  const GradientStretch stretch{ParamGroup::kDecay, 7, 23};
  const StretchOverShards first = SplitOverShards(stretch, 10, 0, 3);
  EXPECT_EQ(first.counts, (std::vector<int64_t>{3, 10, 3}));
  EXPECT_EQ(first.shard_begin, 7);
  EXPECT_EQ(SplitOverShards(stretch, 10, 1, 3).shard_begin, 0);
  EXPECT_EQ(SplitOverShards(stretch, 10, 2, 3).shard_begin, 0);
  // A stretch inside one shard leaves the others empty.
  const StretchOverShards inside = SplitOverShards({ParamGroup::kDecay, 12, 15}, 10, 2, 3);
  EXPECT_EQ(inside.counts, (std::vector<int64_t>{0, 3, 0}));
  EXPECT_EQ(inside.shard_begin, 0);
}

TEST(GradientBucketsTest, WithOverlapABucketStartsWhenItsUnitsFinishInBucketOrder) {
  std::unique_ptr<ParameterSet> params = TwoLayers();
  RecordingCommunicator comm;
  GradientBuckets buckets(*params, comm, PlanGradientBuckets(*params, kTwoLayerUnits, 20),
                          /*overlap=*/true);
  for (int step = 0; step < 2; ++step) {  // Wait starts the next step afresh
    comm.started.clear();
    buckets.Finished(1);  // bucket 1 is ready, but bucket 0 starts first on every replica
    EXPECT_TRUE(comm.started.empty());
    buckets.Finished(0);
    EXPECT_EQ(comm.started, (std::vector<int64_t>{15, 5, 20, 5}));
    buckets.Finished(2);
    EXPECT_EQ(comm.started.size(), 5u);
    buckets.Wait();
    EXPECT_EQ(comm.started, (std::vector<int64_t>{15, 5, 20, 5, 3}));
  }
}

TEST(GradientBucketsTest, WithoutOverlapTheSameCallsStartAtWait) {
  std::unique_ptr<ParameterSet> params = TwoLayers();
  RecordingCommunicator comm;
  GradientBuckets buckets(*params, comm, PlanGradientBuckets(*params, kTwoLayerUnits, 20),
                          /*overlap=*/false);
  for (const int unit : {0, 1, 2}) buckets.Finished(unit);
  EXPECT_TRUE(comm.started.empty());
  buckets.Wait();
  EXPECT_EQ(comm.started, (std::vector<int64_t>{15, 5, 20, 5, 3}));
}

TEST(GradientBucketsDeathTest, AParameterInNoUnitOrAnUnfinishedUnitIsABug) {
  std::unique_ptr<ParameterSet> params = TwoLayers();
  EXPECT_DEATH(PlanGradientBuckets(*params, {{"w1", "n1"}, {"w2", "n2"}}, 20),
               "t is in no gradient unit");
  RecordingCommunicator comm;
  GradientBuckets buckets(*params, comm, PlanGradientBuckets(*params, kTwoLayerUnits, 20), true);
  buckets.Finished(0);
  EXPECT_DEATH(buckets.Wait(), "gradient bucket 1 has 1 unit");
}

}  // namespace
}  // namespace kelvin::parallel
