// The process grid's groups under mpirun: for every way to factor the world into TP x CP x DP x
// PP, each group holds exactly the ranks that share the other coordinates, ordered by its own
// coordinate, and its collectives reach exactly those ranks; Megatron's order spelled out for 8
// ranks; layout errors come back as a Status on every rank, before any communicator exists.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "parallel/process_grid.h"
#include "tests/parallel/mpi/mpi_test_values.h"

namespace kelvin::parallel {
namespace {

using ::kelvin::parallel::testing::TensorOf;
using ::kelvin::parallel::testing::ValuesOf;
using ::testing::HasSubstr;

int WorldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

GridSpec SpecFor(int tp, int cp, int dp, int pp) {
  GridSpec spec;
  spec.world_size = tp * cp * dp * pp;
  spec.tensor_parallel = tp;
  spec.context_parallel = cp;
  spec.data_parallel = dp;
  spec.pipeline_parallel = pp;
  spec.num_attention_heads = 8;
  spec.num_key_value_heads = 8;
  spec.num_layers = 8;
  spec.seq_length = 64;
  spec.global_batch_size = dp;
  return spec;
}

std::unique_ptr<ProcessGrid> MakeGrid(const GridSpec& spec) {
  CommunicatorOptions options;
  options.timeout_seconds = 60;
  auto grid = ProcessGrid::Create(spec, MPI_COMM_WORLD, CommBackend::kMpi, options, Context::Cpu());
  KELVIN_CHECK(grid.ok()) << grid.status();
  return *std::move(grid);
}

// The world ranks sharing this rank's coordinates except those `varies` accepts, ordered by
// world rank (which orders them by the varying coordinates, TP fastest).
std::vector<int> ExpectedMembers(
    const GridSpec& spec,
    const std::function<bool(const GridCoordinates&, const GridCoordinates&)>& same_group) {
  const GridCoordinates mine = CoordinatesOf(WorldRank(), spec);
  std::vector<int> members;
  for (int rank = 0; rank < spec.world_size; ++rank) {
    if (same_group(mine, CoordinatesOf(rank, spec))) members.push_back(rank);
  }
  return members;
}

// The group's members are `expected`, in order, and its collectives reach exactly them.
void ExpectGroup(Communicator& group, const std::vector<int>& expected) {
  SCOPED_TRACE(group.name());
  ASSERT_EQ(group.world_ranks(), expected);
  Tensor gathered = Tensor::Empty({group.size()}, DType::kI32);
  group.AllGather(TensorOf(DType::kI32, {static_cast<double>(WorldRank())}), gathered);
  EXPECT_EQ(ValuesOf(gathered), std::vector<double>(expected.begin(), expected.end()));
  Tensor sum = TensorOf(DType::kI64, {static_cast<double>(WorldRank())});
  group.AllReduce(sum, ReduceOp::kSum);
  EXPECT_EQ(ValuesOf(sum)[0], std::accumulate(expected.begin(), expected.end(), 0.0));
}

void ExpectGridGroups(ProcessGrid& grid) {
  const GridSpec& spec = grid.spec();
  const GridCoordinates c = CoordinatesOf(WorldRank(), spec);
  EXPECT_EQ(grid.tp_rank(), c.tp);
  EXPECT_EQ(grid.cp_rank(), c.cp);
  EXPECT_EQ(grid.dp_rank(), c.dp);
  EXPECT_EQ(grid.pp_rank(), c.pp);
  using C = const GridCoordinates&;
  ExpectGroup(grid.tp(), ExpectedMembers(spec, [](C a, C b) {
                return a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
              }));
  ExpectGroup(grid.cp(), ExpectedMembers(spec, [](C a, C b) {
                return a.tp == b.tp && a.dp == b.dp && a.pp == b.pp;
              }));
  ExpectGroup(grid.dp(), ExpectedMembers(spec, [](C a, C b) {
                return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp;
              }));
  ExpectGroup(grid.pp(), ExpectedMembers(spec, [](C a, C b) {
                return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp;
              }));
  ExpectGroup(grid.dp_cp(),
              ExpectedMembers(spec, [](C a, C b) { return a.tp == b.tp && a.pp == b.pp; }));
  const int last = spec.pipeline_parallel - 1;
  if (grid.is_first_stage() || grid.is_last_stage()) {
    ASSERT_NE(grid.embedding(), nullptr);
    ExpectGroup(*grid.embedding(), ExpectedMembers(spec, [last](C a, C b) {
      return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && (b.pp == 0 || b.pp == last);
    }));
  } else {
    EXPECT_EQ(grid.embedding(), nullptr);
  }
  EXPECT_EQ(grid.world().size(), spec.world_size);
}

TEST(ProcessGridMpiTest, EveryFactorisationOfTheWorld) {
  const int world = WorldSize();
  for (int tp = 1; tp <= world; ++tp) {
    for (int cp = 1; tp * cp <= world; ++cp) {
      for (int dp = 1; tp * cp * dp <= world; ++dp) {
        if (world % (tp * cp * dp) != 0) continue;
        const int pp = world / (tp * cp * dp);
        SCOPED_TRACE(::testing::Message()
                     << "tp " << tp << " cp " << cp << " dp " << dp << " pp " << pp);
        std::unique_ptr<ProcessGrid> grid = MakeGrid(SpecFor(tp, cp, dp, pp));
        ExpectGridGroups(*grid);
      }
    }
  }
}

// Megatron's order spelled out: TP2 x DP2 x PP2 and TP2 x CP2 x DP2 on 8 ranks.
TEST(ProcessGridMpiTest, MegatronOrderOnEightRanks) {
  if (WorldSize() != 8) GTEST_SKIP() << "needs 8 ranks (mpirun -np 8)";
  const int r = WorldRank();
  {
    std::unique_ptr<ProcessGrid> grid = MakeGrid(SpecFor(2, 1, 2, 2));
    const std::vector<std::vector<int>> tp = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    const std::vector<std::vector<int>> dp = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    const std::vector<std::vector<int>> pp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    EXPECT_EQ(grid->tp().world_ranks(), tp[r / 2]);
    EXPECT_EQ(grid->dp().world_ranks(), dp[(r / 4) * 2 + r % 2]);
    EXPECT_EQ(grid->pp().world_ranks(), pp[r % 4]);
    EXPECT_EQ(grid->dp_cp().world_ranks(), dp[(r / 4) * 2 + r % 2]);
    ASSERT_NE(grid->embedding(), nullptr);
    EXPECT_EQ(grid->embedding()->world_ranks(), pp[r % 4]);
    EXPECT_EQ(grid->cp().world_ranks(), std::vector<int>{r});
  }
  {
    std::unique_ptr<ProcessGrid> grid = MakeGrid(SpecFor(2, 2, 2, 1));
    const std::vector<std::vector<int>> cp = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    const std::vector<std::vector<int>> dp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    const std::vector<std::vector<int>> dp_cp = {{0, 2, 4, 6}, {1, 3, 5, 7}};
    EXPECT_EQ(grid->cp().world_ranks(), cp[(r / 4) * 2 + r % 2]);
    EXPECT_EQ(grid->dp().world_ranks(), dp[r % 4]);
    EXPECT_EQ(grid->dp_cp().world_ranks(), dp_cp[r % 2]);
    EXPECT_EQ(grid->pp().world_ranks(), std::vector<int>{r});
    EXPECT_EQ(grid->embedding()->world_ranks(), std::vector<int>{r});  // PP 1: its own stage
    EXPECT_EQ(grid->tp().name(), absl::StrCat("tp[", r - r % 2, ",", r - r % 2 + 1, "]"));
  }
}

TEST(ProcessGridMpiTest, LayoutErrorsComeBackOnEveryRank) {
  const int world = WorldSize();
  GridSpec spec = SpecFor(world, 1, 1, 1);
  spec.world_size = world + 1;
  auto wrong_world = ProcessGrid::Create(spec, MPI_COMM_WORLD, CommBackend::kMpi,
                                         CommunicatorOptions(), Context::Cpu());
  ASSERT_FALSE(wrong_world.ok());
  EXPECT_THAT(wrong_world.status().message(),
              HasSubstr(absl::StrCat("the layout is for world size ", world + 1,
                                     ", but the MPI world has ", world, " processes")));
  GridSpec heads = SpecFor(world, 1, 1, 1);
  heads.num_attention_heads = 2 * world + 1;
  auto bad_heads = ProcessGrid::Create(heads, MPI_COMM_WORLD, CommBackend::kMpi,
                                       CommunicatorOptions(), Context::Cpu());
  ASSERT_FALSE(bad_heads.ok());
  EXPECT_THAT(bad_heads.status().message(),
              HasSubstr(absl::StrCat("num_attention_heads=", 2 * world + 1,
                                     " is not divisible by tensor_parallel=", world)));
}

// A CPU case (no "Cuda" in its name, so the CPU entries run it): without a device, NCCL is refused.
TEST(ProcessGridMpiTest, NcclWithoutADeviceIsRefused) {
  if (CudaAvailable()) GTEST_SKIP() << "CUDA is available: the NCCL backend may be built";
  auto grid = ProcessGrid::Create(SpecFor(WorldSize(), 1, 1, 1), MPI_COMM_WORLD, CommBackend::kNccl,
                                  CommunicatorOptions(), Context::Cpu());
  ASSERT_FALSE(grid.ok());
  EXPECT_THAT(grid.status().message(), HasSubstr("communicator world: the NCCL backend needs"));
}

}  // namespace
}  // namespace kelvin::parallel
