// The context-parallel split on a one-rank group (the model's group without context parallelism):
// one block of whole rows, so the rank's tokens, the gathered rows and the reduce-scattered sums
// are the values unchanged, for any T (odd included); a tensor that is not a split of the rows is
// refused, naming it.
#include <gtest/gtest.h>

#include "core/copy.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/context_parallel.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"

namespace kelvin::parallel {
namespace {

TEST(ContextSplit, OneRankHoldsTheWholeRowsUnchanged) {
  SelfCommunicator cp("cp", 0, Context::Cpu());
  const int64_t rows = 3, seq = 5, width = 2;
  const ContextSplit split(cp, rows, seq);
  ASSERT_EQ(split.blocks().size(), 1u);
  EXPECT_EQ(split.blocks()[0].begin, 0);
  EXPECT_EQ(split.blocks()[0].length, seq);
  EXPECT_EQ(split.blocks()[0].local_begin, 0);
  EXPECT_EQ(split.local_tokens(), rows * seq);

  const Tensor ids = kelvin::testing::RandomInts({rows, seq}, DType::kI32, 5, 0, 100);  // [B, T]
  EXPECT_TRUE(kelvin::testing::BitIdentical(split.Local(ids), ids.View({-1}), "the rank's ids"));

  const Tensor values =
      kelvin::testing::Random({rows * seq, width}, DType::kF32, 6, -1, 1);  // [B*T, W]
  Tensor local = Tensor::Empty({rows * seq, width}, DType::kF32);
  split.Local(Context::Cpu(), values, local);
  EXPECT_TRUE(kelvin::testing::BitIdentical(local, values, "the rank's values"));
  Tensor scratch = Tensor::Empty({rows * seq * width}, DType::kF32);
  Tensor full = Tensor::Empty({rows * seq, width}, DType::kF32);
  split.Gather(Context::Cpu(), values, scratch, full);
  EXPECT_TRUE(kelvin::testing::BitIdentical(full, values, "gathered"));
  split.ReduceScatter(Context::Cpu(), values, scratch, local);
  EXPECT_TRUE(kelvin::testing::BitIdentical(local, values, "reduce-scattered"));
}

TEST(ContextSplitDeathTest, ATensorThatIsNotASplitOfTheRowsIsRefused) {
  SelfCommunicator cp("cp", 0, Context::Cpu());
  const ContextSplit split(cp, 2, 4);
  const Tensor ids = Tensor::Empty({2, 3}, DType::kI32);
  EXPECT_DEATH(split.Local(ids), "context parallelism: .* is not a split of 2 rows of 4 tokens");
  Tensor local = Tensor::Empty({6}, DType::kI32);
  EXPECT_DEATH(split.Local(Context::Cpu(), Tensor::Empty({2, 4}, DType::kI32), local),
               "is not a split of 2 rows of 4 tokens over 1 ranks");
}

}  // namespace
}  // namespace kelvin::parallel
