// The context-parallel split over the world group (under mpirun -np N): rank r holds chunks r and
// 2N - 1 - r of every row, in that order; gathering every rank's tokens gives the rows back, and
// the reduce-scatter gives each rank the sum over the ranks of its own tokens.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/context_parallel.h"
#include "tests/parallel/mpi/mpi_test_values.h"

namespace kelvin::parallel {
namespace {

using ::kelvin::parallel::testing::TensorOf;
using ::kelvin::parallel::testing::TestValue;
using ::kelvin::parallel::testing::ValuesOf;
using ::kelvin::parallel::testing::World;

constexpr int64_t kRows = 2, kWidth = 3;  // B, W values per token

// The token indices (b * T + t) rank `rank` of `ranks` holds, in its layout's order.
std::vector<double> TokensOf(int rank, int ranks, int64_t seq) {
  const int64_t tc = seq / (2 * ranks);
  std::vector<double> tokens;
  for (const int64_t chunk : {int64_t{rank}, int64_t{2 * ranks - 1 - rank}}) {
    for (int64_t b = 0; b < kRows; ++b) {
      for (int64_t i = 0; i < tc; ++i)
        tokens.push_back(static_cast<double>(b * seq + chunk * tc + i));
    }
  }
  return tokens;
}

TEST(ContextSplitRanks, EachRankHoldsItsEarlyAndLateChunkOfEveryRow) {
  const std::unique_ptr<Communicator> cp = World();
  const int rank = cp->rank(), ranks = cp->size();
  const int64_t seq = 4 * ranks, tc = 2;  // two tokens per chunk
  const ContextSplit split(*cp, kRows, seq);
  ASSERT_EQ(split.blocks().size(), 2u);
  EXPECT_EQ(split.blocks()[0].begin, rank * tc);
  EXPECT_EQ(split.blocks()[1].begin, (2 * ranks - 1 - rank) * tc);
  EXPECT_EQ(split.blocks()[1].local_begin, kRows * tc);
  EXPECT_EQ(split.local_tokens(), kRows * seq / ranks);
  std::vector<double> index;
  for (int64_t i = 0; i < kRows * seq; ++i) index.push_back(static_cast<double>(i));
  const Tensor ids = TensorOf(DType::kI32, index).View({kRows, seq});  // [B, T]
  EXPECT_EQ(ValuesOf(split.Local(ids)), TokensOf(rank, ranks, seq));
}

TEST(ContextSplitRanks, GatherGivesTheRowsBackAndReduceScatterSumsEachRanksTokens) {
  const std::unique_ptr<Communicator> cp = World();
  const int rank = cp->rank(), ranks = cp->size();
  const int64_t seq = 4 * ranks, tokens = kRows * seq, n = tokens / ranks;
  const ContextSplit split(*cp, kRows, seq);
  // The rows [B*T, W]: token j's values those of element j * W + w of rank 0.
  std::vector<double> rows;
  for (int64_t i = 0; i < tokens * kWidth; ++i) rows.push_back(TestValue(DType::kF64, 0, i));
  const Tensor whole = TensorOf(DType::kF64, rows).View({tokens, kWidth});
  Tensor local = Tensor::Empty({n, kWidth}, DType::kF64);
  split.Local(Context::Cpu(), whole, local);
  Tensor scratch = Tensor::Empty({tokens * kWidth}, DType::kF64);
  Tensor gathered = Tensor::Empty({tokens, kWidth}, DType::kF64);
  split.Gather(Context::Cpu(), local, scratch, gathered);
  EXPECT_EQ(ValuesOf(gathered.View({-1})), rows);

  // Each rank's partial sums over the whole rows: element i is TestValue(rank, i).
  std::vector<double> partial;
  for (int64_t i = 0; i < tokens * kWidth; ++i) partial.push_back(TestValue(DType::kF64, rank, i));
  split.ReduceScatter(Context::Cpu(), TensorOf(DType::kF64, partial).View({tokens, kWidth}),
                      scratch, local);
  const std::vector<double> got = ValuesOf(local.View({-1}));
  const std::vector<double> mine = TokensOf(rank, ranks, seq);
  ASSERT_EQ(got.size(), mine.size() * kWidth);
  for (size_t t = 0; t < mine.size(); ++t) {
    for (int64_t w = 0; w < kWidth; ++w) {
      const auto i = static_cast<int64_t>(mine[t]) * kWidth + w;
      double sum = 0;
      for (int r = 0; r < ranks; ++r) sum += TestValue(DType::kF64, r, i);
      EXPECT_EQ(got[t * kWidth + w], sum) << "token " << mine[t] << " value " << w;
    }
  }
}

}  // namespace
}  // namespace kelvin::parallel
