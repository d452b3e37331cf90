// ParameterGather on one process: after ZeRO-1's step each bucket's gathered masters wait in the
// gradient buffers until the forward waits for the bucket, which then holds the step's values (the
// bits of the gather inside Step) over zeroed gradients; gathers start from the bucket the forward
// reads first.
#include "parallel/parameter_gather.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/copy.h"
#include "parallel/comm/self_communicator.h"
#include "tests/parallel/bucket_testing.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"

namespace kelvin::parallel {
namespace {

using ::kelvin::parallel::testing::kTwoLayerUnits;
using ::kelvin::parallel::testing::RecordingCommunicator;
using ::kelvin::parallel::testing::TwoLayers;

void FillGradients(ParameterSet& params) {
  uint64_t seed = 100;
  for (const ParameterSet::Entry& e : params.entries()) {
    Tensor grad = params.grad(e.name);
    CopyTensor(Context::Cpu(), kelvin::testing::Random(e.shape, DType::kF32, seed++), grad);
  }
}

const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 1.0};

bool AllZero(const Tensor& t) {
  const float* values = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (values[i] != 0.0f) return false;
  }
  return true;
}

// One rank without a model copy: the step updates the values (its shard) itself, and the gather
// brings the same masters into the gradient buffers, where they wait to be copied and zeroed.
TEST(ParameterGatherTest, EachBucketHoldsTheStepsValuesOnceTheForwardWaitsForIt) {
  std::unique_ptr<ParameterSet> blocking = TwoLayers(), overlapped = TwoLayers();
  SelfCommunicator self("dp_cp", 0, Context::Cpu());
  DistributedAdamW gathers_in_step(*blocking, kSettings, self);
  DistributedAdamW leaves_it(*overlapped, kSettings, self);
  ParameterGather gather(*overlapped, self, PlanGradientBuckets(*overlapped, kTwoLayerUnits, 1),
                         leaves_it);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    for (ParameterSet* params : {blocking.get(), overlapped.get()}) {
      FillGradients(*params);
      // One rank: each "reduced shard" is the whole gradient.
      GradientBuckets sums(*params, self, PlanGradientBuckets(*params, kTwoLayerUnits, 1), false,
                           params == blocking.get() ? &gathers_in_step : &leaves_it);
      for (const int unit : {0, 1, 2}) sums.Finished(unit);
      sums.Wait();
    }
    gathers_in_step.Step(Context::Cpu(), 1e-2);
    leaves_it.Step(Context::Cpu(), 1e-2);
    EXPECT_TRUE(gather.in_flight());
    for (const ParameterSet::Entry& e : overlapped->entries()) {  // gathered, not yet waited for
      EXPECT_TRUE(kelvin::testing::BitIdentical(e.grad, blocking->value(e.name), e.name));
    }
    gather.WaitFor(2);  // the temperatures' bucket
    EXPECT_TRUE(kelvin::testing::BitIdentical(overlapped->value("t"), blocking->value("t"), "t"));
    EXPECT_TRUE(AllZero(overlapped->grad("t")));
    EXPECT_FALSE(AllZero(overlapped->grad("w1")));
    EXPECT_TRUE(gather.in_flight());
    gather.WaitFor(2);  // a no-op once waited for
    gather.WaitAll();
    EXPECT_FALSE(gather.in_flight());
    for (const ParameterSet::Entry& e : overlapped->entries()) {
      EXPECT_TRUE(kelvin::testing::BitIdentical(e.value, blocking->value(e.name), e.name));
      EXPECT_TRUE(AllZero(e.grad)) << e.name;
    }
  }
}

TEST(ParameterGatherTest, StartsFromTheBucketTheForwardReadsFirst) {
  std::unique_ptr<ParameterSet> params = TwoLayers();
  RecordingCommunicator comm;
  DistributedAdamW zero(*params, kSettings, comm);
  ParameterGather gather(*params, comm, PlanGradientBuckets(*params, kTwoLayerUnits, 20), zero);
  zero.Step(Context::Cpu(), 1e-2);
  // Buckets {layer 2: decay 15, no-decay 5}, {layer 1: 20, 5}, {t: 3}, started last to first.
  EXPECT_EQ(comm.gathered, (std::vector<int64_t>{3, 20, 5, 15, 5}));
  gather.WaitAll();
}

TEST(ParameterGatherDeathTest, AGatherStartedBeforeTheLastWasWaitedForIsABug) {
  std::unique_ptr<ParameterSet> params = TwoLayers();
  RecordingCommunicator comm;
  DistributedAdamW zero(*params, kSettings, comm);
  ParameterGather gather(*params, comm, PlanGradientBuckets(*params, kTwoLayerUnits, 20), zero);
  gather.Start();
  EXPECT_DEATH(gather.Start(), "Start with 3 bucket\\(s\\) of the last gather not waited for");
  gather.WaitAll();
}

}  // namespace
}  // namespace kelvin::parallel
