// The tensor-parallel region ops on a one-rank group (the model's group without tensor
// parallelism): the values pass unchanged; a buffer of the wrong size is refused, naming it.
#include "parallel/tensor_parallel.h"

#include <gtest/gtest.h>

#include "core/copy.h"
#include "parallel/comm/self_communicator.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"

namespace kelvin::parallel {
namespace {

TEST(TensorParallelRegions, OneRankPassesTheValuesUnchanged) {
  SelfCommunicator tp("tp", 0, Context::Cpu());
  const Tensor values = kelvin::testing::Random({4, 3}, DType::kF32, 7, -1, 1);  // [N, W]
  Tensor reduced = CopyToDevice(Context::Cpu(), values, Device::Cpu());
  ReduceFromTensorParallelRegion(tp, reduced);
  EXPECT_TRUE(kelvin::testing::BitIdentical(reduced, values, "reduced"));
  Tensor local = Tensor::Empty({4, 3}, DType::kF32);
  ReduceScatterToSequenceParallelRegion(tp, values, local);
  EXPECT_TRUE(kelvin::testing::BitIdentical(local, values, "reduce-scattered"));
  Tensor full = Tensor::Empty({4, 3}, DType::kF32);
  GatherFromSequenceParallelRegion(tp, values, full);
  EXPECT_TRUE(kelvin::testing::BitIdentical(full, values, "gathered"));
  // The column gather hands back the rank's own columns, unmoved.
  const Tensor columns = GatherFromTensorParallelRegion(Context::Cpu(), tp, values);
  EXPECT_EQ(columns.raw_data(), values.raw_data());
  EXPECT_TRUE(kelvin::testing::BitIdentical(columns, values, "column-gathered"));
}

TEST(TensorParallelRegionsDeathTest, ABufferOfTheWrongSizeIsRefused) {
  SelfCommunicator tp("tp", 0, Context::Cpu());
  const Tensor local = Tensor::Empty({2, 3}, DType::kF32);
  Tensor full = Tensor::Empty({3, 3}, DType::kF32);
  EXPECT_DEATH(GatherFromSequenceParallelRegion(tp, local, full),
               "gather from the sequence-parallel region: .* over 1 ranks into");
  Tensor too_few = Tensor::Empty({2, 3}, DType::kF32);
  EXPECT_DEATH(ReduceScatterToSequenceParallelRegion(tp, full, too_few),
               "reduce-scatter to the sequence-parallel region");
}

}  // namespace
}  // namespace kelvin::parallel
