// The tensor-parallel region ops over the world group, against sums and concatenations computed
// locally from every rank's values. Runs under mpirun -np N.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/tensor_parallel.h"
#include "tests/parallel/mpi/mpi_test_values.h"

namespace kelvin::parallel {
namespace {

using ::kelvin::parallel::testing::TensorOf;
using ::kelvin::parallel::testing::TestValue;
using ::kelvin::parallel::testing::ValuesOf;
using ::kelvin::parallel::testing::World;

constexpr int64_t kWidth = 3;  // W values per token

// Rank r's [tokens, W] f64 values.
Tensor RankTokens(int rank, int64_t tokens) {
  std::vector<double> values;
  for (int64_t i = 0; i < tokens * kWidth; ++i) values.push_back(TestValue(DType::kF64, rank, i));
  return TensorOf(DType::kF64, values).View({tokens, kWidth});
}

// Element i of the sum over every rank of RankTokens.
double SumOverRanks(int ranks, int64_t i) {
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += TestValue(DType::kF64, r, i);
  return sum;
}

TEST(TensorParallelRegions, ReduceFromTheRegionSumsEveryRanksPartials) {
  const std::unique_ptr<Communicator> tp = World();
  const int64_t tokens = 5;
  Tensor partial = RankTokens(tp->rank(), tokens);
  ReduceFromTensorParallelRegion(*tp, partial);
  const std::vector<double> got = ValuesOf(partial.View({-1}));
  for (int64_t i = 0; i < tokens * kWidth; ++i) {
    ASSERT_EQ(got[i], SumOverRanks(tp->size(), i)) << "element " << i;
  }
}

TEST(TensorParallelRegions, ReduceScatterKeepsTheSumAtThisRanksTokens) {
  const std::unique_ptr<Communicator> tp = World();
  const int64_t local_tokens = 2, tokens = local_tokens * tp->size();
  const Tensor partial = RankTokens(tp->rank(), tokens);
  Tensor local = Tensor::Empty({local_tokens, kWidth}, DType::kF64);
  ReduceScatterToSequenceParallelRegion(*tp, partial, local);
  const std::vector<double> got = ValuesOf(local.View({-1}));
  const int64_t first = tp->rank() * local_tokens * kWidth;  // this rank's first element
  for (int64_t i = 0; i < local_tokens * kWidth; ++i) {
    ASSERT_EQ(got[i], SumOverRanks(tp->size(), first + i)) << "element " << i;
  }
}

TEST(TensorParallelRegions, GatherPlacesEveryRanksTokensInRankOrder) {
  const std::unique_ptr<Communicator> tp = World();
  const int64_t local_tokens = 2;
  const Tensor local = RankTokens(tp->rank(), local_tokens);
  Tensor full = Tensor::Empty({local_tokens * tp->size(), kWidth}, DType::kF64);
  GatherFromSequenceParallelRegion(*tp, local, full);
  const std::vector<double> got = ValuesOf(full.View({-1}));
  for (int r = 0; r < tp->size(); ++r) {
    for (int64_t i = 0; i < local_tokens * kWidth; ++i) {
      ASSERT_EQ(got[r * local_tokens * kWidth + i], TestValue(DType::kF64, r, i))
          << "rank " << r << " element " << i;
    }
  }
}

TEST(TensorParallelRegions, ColumnGatherPlacesEachRowsSlicesInRankOrder) {
  const std::unique_ptr<Communicator> tp = World();
  const int64_t rows = 2, ranks = tp->size();
  const Tensor local = RankTokens(tp->rank(), rows);  // [R, W / TP] this rank's columns
  const Tensor full = GatherFromTensorParallelRegion(Context::Cpu(), *tp, local);
  ASSERT_EQ(full.shape(), Shape({rows, ranks * kWidth}));
  const std::vector<double> got = ValuesOf(full.View({-1}));
  for (int64_t row = 0; row < rows; ++row) {
    for (int r = 0; r < ranks; ++r) {
      for (int64_t c = 0; c < kWidth; ++c) {
        ASSERT_EQ(got[(row * ranks + r) * kWidth + c], TestValue(DType::kF64, r, row * kWidth + c))
            << "row " << row << " rank " << r << " column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace kelvin::parallel
