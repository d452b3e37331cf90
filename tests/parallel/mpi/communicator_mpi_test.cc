// Every collective and point-to-point call of the MPI communicator, blocking and non-blocking, on
// every dtype and on 1, 7 and 1001 elements (uneven splits with empty chunks), against values
// computed locally; on the world group and on a group whose
// ranks run opposite to the world's (so group and world ranks differ). Runs under mpirun -np N.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/bf16.h"
#include "core/copy.h"
#include "core/device.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/rank_discovery.h"
#include "tests/parallel/mpi/mpi_test_values.h"
#include "tests/testing/backends.h"

namespace kelvin::parallel {
namespace {

using ::kelvin::parallel::testing::TensorOf;
using ::kelvin::parallel::testing::TestValue;
using ::kelvin::parallel::testing::ValuesOf;

constexpr DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
constexpr int64_t kSizes[] = {1, 7, 1001};

CommunicatorOptions TestOptions() {
  CommunicatorOptions options;
  options.timeout_seconds = 60;  // a broken test aborts instead of hanging until CTest's timeout
  return options;
}

enum class Group { kWorld, kReversed };

std::unique_ptr<Communicator> MakeCommunicator(Group group) {
  MPI_Comm comm = MPI_COMM_WORLD;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (group == Group::kReversed) MPI_Comm_split(MPI_COMM_WORLD, 0, -world_rank, &comm);
  auto communicator =
      CreateCommunicator(CommBackend::kMpi, comm, group == Group::kWorld ? "world" : "reversed",
                         TestOptions(), Context::Cpu());
  if (group == Group::kReversed) MPI_Comm_free(&comm);
  KELVIN_CHECK(communicator.ok()) << communicator.status();
  return *std::move(communicator);
}

// op over per_rank values with the backend's documented arithmetic: bf16 and f32 reduce in f32
// (exact here), bf16 rounds once at the end; avg divides the sum by the group size.
double Reduced(DType dtype, ReduceOp op, const std::vector<double>& per_rank) {
  if (op == ReduceOp::kMax) return *std::max_element(per_rank.begin(), per_rank.end());
  const double sum = std::accumulate(per_rank.begin(), per_rank.end(), 0.0);
  const int size = static_cast<int>(per_rank.size());
  if (dtype == DType::kF64) return op == ReduceOp::kAvg ? sum / size : sum;
  if (dtype == DType::kI32 || dtype == DType::kI64) return sum;
  const float result =
      op == ReduceOp::kAvg ? static_cast<float>(sum) / static_cast<float>(size) : float(sum);
  return dtype == DType::kBF16 ? RoundToBf16(result) : result;
}

// Rank r's values at indices [begin, begin + n).
std::vector<double> RankValues(DType dtype, int rank, int64_t begin, int64_t n) {
  std::vector<double> values;
  for (int64_t i = begin; i < begin + n; ++i) values.push_back(TestValue(dtype, rank, i));
  return values;
}

std::vector<ReduceOp> ReductionsFor(DType dtype) {
  if (IsFloating(dtype)) return {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
  return {ReduceOp::kSum, ReduceOp::kMax};
}

class MpiCommunicatorTest : public ::testing::TestWithParam<Group> {
 protected:
  void SetUp() override { comm_ = MakeCommunicator(GetParam()); }
  std::unique_ptr<Communicator> comm_;
};

TEST_P(MpiCommunicatorTest, NamesTheGroupByItsWorldRanks) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::vector<int> expected(static_cast<size_t>(world_size));
  std::iota(expected.begin(), expected.end(), 0);
  if (GetParam() == Group::kReversed) std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(comm_->world_ranks(), expected);
  EXPECT_EQ(comm_->size(), world_size);
  EXPECT_EQ(comm_->world_ranks()[static_cast<size_t>(comm_->rank())], world_rank);
  // "world[0,1,2,3]", "reversed[3,2,1,0]" (the tests run on at most 8 ranks: no elision).
  EXPECT_EQ(comm_->name(), absl::StrCat(GetParam() == Group::kWorld ? "world" : "reversed", "[",
                                        absl::StrJoin(expected, ","), "]"));
}

TEST_P(MpiCommunicatorTest, AllReduce) {
  for (const DType dtype : kDTypes) {
    for (const ReduceOp op : ReductionsFor(dtype)) {
      for (const int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " " << ReduceOpName(op) << " n=" << n);
        Tensor tensor = TensorOf(dtype, RankValues(dtype, comm_->rank(), 0, n));
        comm_->AllReduce(tensor, op);
        const std::vector<double> got = ValuesOf(tensor);
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> per_rank;
          for (int r = 0; r < comm_->size(); ++r) per_rank.push_back(TestValue(dtype, r, i));
          ASSERT_EQ(got[static_cast<size_t>(i)], Reduced(dtype, op, per_rank)) << "element " << i;
        }
      }
    }
  }
}

TEST_P(MpiCommunicatorTest, Bf16SumRoundsOnceNotPerStep) {
  // 1 + 8 x 2^-9 summed in f32 is 1 + 2^-6 (a bf16 value); bf16 steps would stay at 1 each time.
  Tensor tensor = TensorOf(DType::kBF16, {comm_->rank() == 0 ? 1.0 : 0.0078125});
  comm_->AllReduce(tensor, ReduceOp::kSum);
  EXPECT_EQ(ValuesOf(tensor)[0], RoundToBf16(1.0f + 0.0078125f * (comm_->size() - 1)));
}

TEST_P(MpiCommunicatorTest, AllGather) {
  for (const DType dtype : kDTypes) {
    for (const int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n=" << n);
      const Tensor input = TensorOf(dtype, RankValues(dtype, comm_->rank(), 0, n));
      Tensor output = Tensor::Empty({comm_->size(), n}, dtype);
      comm_->AllGather(input, output);
      std::vector<double> expected;
      for (int r = 0; r < comm_->size(); ++r) {
        const std::vector<double> chunk = RankValues(dtype, r, 0, n);
        expected.insert(expected.end(), chunk.begin(), chunk.end());
      }
      ASSERT_EQ(ValuesOf(output), expected);
    }
  }
}

TEST_P(MpiCommunicatorTest, ReduceScatter) {
  const int size = comm_->size();
  for (const DType dtype : kDTypes) {
    for (const ReduceOp op : ReductionsFor(dtype)) {
      for (const int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " " << ReduceOpName(op) << " n=" << n);
        const Tensor input = TensorOf(dtype, RankValues(dtype, comm_->rank(), 0, size * n));
        Tensor output = Tensor::Empty({n}, dtype);
        comm_->ReduceScatter(input, output, op);
        const std::vector<double> got = ValuesOf(output);
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> per_rank;
          for (int r = 0; r < size; ++r) {
            per_rank.push_back(TestValue(dtype, r, comm_->rank() * n + i));
          }
          ASSERT_EQ(got[static_cast<size_t>(i)], Reduced(dtype, op, per_rank)) << "element " << i;
        }
      }
    }
  }
}

// Chunk j of the input holds (j + rank of the group) mod 3 elements: zero-sized chunks included,
// and each rank's own chunk sized differently.
std::vector<int64_t> UnevenCounts(int size, int64_t scale) {
  std::vector<int64_t> counts;
  for (int j = 0; j < size; ++j) counts.push_back(scale * ((j + 1) % 3));
  return counts;
}

TEST_P(MpiCommunicatorTest, ReduceScatterUneven) {
  const int size = comm_->size(), rank = comm_->rank();
  for (const DType dtype : kDTypes) {
    for (const ReduceOp op : ReductionsFor(dtype)) {
      for (const int64_t scale : {1, 333}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " " << ReduceOpName(op) << " scale " << scale);
        const std::vector<int64_t> counts = UnevenCounts(size, scale);
        const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
        const int64_t begin = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
        const Tensor input = TensorOf(dtype, RankValues(dtype, rank, 0, total));
        Tensor output = Tensor::Empty({counts[static_cast<size_t>(rank)]}, dtype);
        comm_->ReduceScatterUneven(input, output, counts, op);
        const std::vector<double> got = ValuesOf(output);
        for (int64_t i = 0; i < output.numel(); ++i) {
          std::vector<double> per_rank;
          for (int r = 0; r < size; ++r) per_rank.push_back(TestValue(dtype, r, begin + i));
          ASSERT_EQ(got[static_cast<size_t>(i)], Reduced(dtype, op, per_rank)) << "element " << i;
        }
      }
    }
  }
}

// What AllGatherUneven of UnevenCounts(size, scale) gives: rank j's counts[j] values of its test
// sequence from index 100, in rank order.
std::vector<double> UnevenGathered(DType dtype, const std::vector<int64_t>& counts) {
  std::vector<double> expected;
  for (int j = 0; j < static_cast<int>(counts.size()); ++j) {
    const std::vector<double> chunk = RankValues(dtype, j, 100, counts[static_cast<size_t>(j)]);
    expected.insert(expected.end(), chunk.begin(), chunk.end());
  }
  return expected;
}

TEST_P(MpiCommunicatorTest, AllGatherUneven) {
  const int size = comm_->size(), rank = comm_->rank();
  for (const DType dtype : kDTypes) {
    for (const int64_t scale : {1, 333}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " scale " << scale);
      const std::vector<int64_t> counts = UnevenCounts(size, scale);
      const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      const Tensor input =
          TensorOf(dtype, RankValues(dtype, rank, 100, counts[static_cast<size_t>(rank)]));
      Tensor output = Tensor::Empty({total}, dtype);
      comm_->AllGatherUneven(input, output, counts);
      EXPECT_EQ(ValuesOf(output), UnevenGathered(dtype, counts));
    }
  }
}

// Several non-blocking collectives in flight at once, a blocking call among them, waited for in
// reverse order: each gets its own result, and the calls' notices do not mix.
TEST_P(MpiCommunicatorTest, NonBlockingCallsInFlightTogetherEachCompleteRightly) {
  const int size = comm_->size(), rank = comm_->rank();
  auto sum_at = [&](DType dtype, int64_t i) {
    std::vector<double> per_rank;
    for (int r = 0; r < size; ++r) per_rank.push_back(TestValue(dtype, r, i));
    return Reduced(dtype, ReduceOp::kSum, per_rank);
  };
  Tensor first = TensorOf(DType::kF32, RankValues(DType::kF32, rank, 0, 1001));
  Tensor second = TensorOf(DType::kBF16, RankValues(DType::kBF16, rank, 0, 7));
  const std::vector<int64_t> counts = UnevenCounts(size, 100);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t begin = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
  const Tensor input = TensorOf(DType::kF64, RankValues(DType::kF64, rank, 0, total));
  Tensor scattered = Tensor::Empty({counts[static_cast<size_t>(rank)]}, DType::kF64);
  const Tensor own = TensorOf(
      DType::kBF16, RankValues(DType::kBF16, rank, 100, counts[static_cast<size_t>(rank)]));
  Tensor gathered = Tensor::Empty({total}, DType::kBF16);
  std::vector<std::unique_ptr<PendingCollective>> pending;
  pending.push_back(comm_->StartAllReduce(first, ReduceOp::kSum));
  pending.push_back(comm_->StartReduceScatterUneven(input, scattered, counts, ReduceOp::kSum));
  const double scalar = comm_->AllReduceScalar(rank + 1.0, ReduceOp::kSum);  // blocking, between
  pending.push_back(comm_->StartAllReduce(second, ReduceOp::kSum));
  pending.push_back(comm_->StartAllGatherUneven(own, gathered, counts));
  for (const auto& p : pending) p->Progress();
  for (auto p = pending.rbegin(); p != pending.rend(); ++p) (*p)->Wait();
  EXPECT_EQ(scalar, size * (size + 1) / 2.0);
  const std::vector<double> got_first = ValuesOf(first), got_second = ValuesOf(second);
  for (int64_t i = 0; i < 1001; ++i) {
    ASSERT_EQ(got_first[static_cast<size_t>(i)], sum_at(DType::kF32, i)) << "element " << i;
  }
  for (int64_t i = 0; i < 7; ++i) {
    ASSERT_EQ(got_second[static_cast<size_t>(i)], sum_at(DType::kBF16, i)) << "element " << i;
  }
  const std::vector<double> got_scattered = ValuesOf(scattered);
  for (int64_t i = 0; i < scattered.numel(); ++i) {
    ASSERT_EQ(got_scattered[static_cast<size_t>(i)], sum_at(DType::kF64, begin + i));
  }
  EXPECT_EQ(ValuesOf(gathered), UnevenGathered(DType::kBF16, counts));
}

TEST_P(MpiCommunicatorTest, Broadcast) {
  for (const DType dtype : kDTypes) {
    for (const int64_t n : kSizes) {
      for (const int root : {0, comm_->size() - 1}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n=" << n << " root " << root);
        Tensor tensor = TensorOf(dtype, RankValues(dtype, comm_->rank(), 0, n));
        comm_->Broadcast(tensor, root);
        ASSERT_EQ(ValuesOf(tensor), RankValues(dtype, root, 0, n));
      }
    }
  }
}

TEST_P(MpiCommunicatorTest, AllToAll) {
  const int size = comm_->size();
  for (const DType dtype : kDTypes) {
    for (const int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n=" << n);
      // Chunk c of rank r's input (values at c*n .. c*n+n-1) goes to rank c.
      const Tensor input = TensorOf(dtype, RankValues(dtype, comm_->rank(), 0, size * n));
      Tensor output = Tensor::Empty({size * n}, dtype);
      comm_->AllToAll(input, output);
      std::vector<double> expected;
      for (int r = 0; r < size; ++r) {
        const std::vector<double> chunk = RankValues(dtype, r, comm_->rank() * n, n);
        expected.insert(expected.end(), chunk.begin(), chunk.end());
      }
      ASSERT_EQ(ValuesOf(output), expected);
    }
  }
}

TEST_P(MpiCommunicatorTest, SendAndRecvAlongAChain) {
  // Rank 0's two messages travel the chain 0 -> 1 -> ... -> size-1, checked at every hop; two
  // per hop check that successive messages between two ranks arrive in order.
  const int rank = comm_->rank(), size = comm_->size();
  for (const DType dtype : kDTypes) {
    for (const int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n=" << n);
      Tensor first = TensorOf(dtype, RankValues(dtype, 0, 0, n));
      Tensor second = TensorOf(dtype, RankValues(dtype, 1, 0, n));
      if (rank > 0) {
        first = Tensor::Empty({n}, dtype);
        second = Tensor::Empty({n}, dtype);
        comm_->Recv(first, rank - 1);
        comm_->Recv(second, rank - 1);
        ASSERT_EQ(ValuesOf(first), RankValues(dtype, 0, 0, n));
        ASSERT_EQ(ValuesOf(second), RankValues(dtype, 1, 0, n));
      }
      if (rank + 1 < size) {
        comm_->Send(first, rank + 1);
        comm_->Send(second, rank + 1);
      }
    }
  }
}

TEST_P(MpiCommunicatorTest, BarrierWaitsForTheLastRank) {
  comm_->Barrier();
  const auto start = std::chrono::steady_clock::now();
  if (comm_->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  comm_->Barrier();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
}

TEST_P(MpiCommunicatorTest, EmptyTensorsPass) {
  Tensor empty = Tensor::Empty({0}, DType::kF32);
  comm_->AllReduce(empty, ReduceOp::kSum);
  Tensor gathered = Tensor::Empty({0}, DType::kF32);
  comm_->AllGather(empty, gathered);
  EXPECT_EQ(gathered.numel(), 0);
}

TEST_P(MpiCommunicatorTest, AgreeOnStatusNamesTheRanksThatFailed) {
  EXPECT_TRUE(AgreeOnStatus(*comm_, absl::OkStatus(), "saving").ok());
  // The group's last rank fails: it keeps its own error, every other rank learns where it failed.
  const int last = comm_->size() - 1;
  const absl::Status mine =
      comm_->rank() == last ? absl::DataLossError("disk full") : absl::OkStatus();
  const absl::Status agreed = AgreeOnStatus(*comm_, mine, "writing a part");
  if (comm_->rank() == last) {
    EXPECT_EQ(agreed, mine);
  } else {
    EXPECT_EQ(agreed.code(), absl::StatusCode::kAborted);
    EXPECT_EQ(agreed.message(), absl::StrCat("writing a part failed on rank ", last, " of ",
                                             comm_->name(), " (its own message says why)"));
  }
}

TEST_P(MpiCommunicatorTest, ShareFirstFailureGivesEveryRankTheFirstFailingRanksError) {
  EXPECT_TRUE(ShareFirstFailure(*comm_, absl::OkStatus()).ok());
  // Every rank but group rank 0 fails, each its own way: all take group rank 1's error.
  const absl::Status mine =
      comm_->rank() == 0 ? absl::OkStatus()
                         : absl::DataLossError(absl::StrCat("part ", comm_->rank(), " damaged"));
  const absl::Status shared = ShareFirstFailure(*comm_, mine);
  if (comm_->size() == 1) {
    EXPECT_TRUE(shared.ok());
  } else {
    EXPECT_EQ(shared, absl::DataLossError("part 1 damaged"));
  }
  // The last rank's long message, cut to kSharedMessageBytes on every rank.
  const std::string long_message(kSharedMessageBytes + 5, 'x');
  const absl::Status last_fails =
      comm_->rank() == comm_->size() - 1 ? absl::NotFoundError(long_message) : absl::OkStatus();
  EXPECT_EQ(ShareFirstFailure(*comm_, last_fails),
            absl::NotFoundError(long_message.substr(0, kSharedMessageBytes)));
}

INSTANTIATE_TEST_SUITE_P(Groups, MpiCommunicatorTest,
                         ::testing::Values(Group::kWorld, Group::kReversed),
                         [](const ::testing::TestParamInfo<Group>& info) {
                           return info.param == Group::kWorld ? "World" : "Reversed";
                         });

TEST(MpiCommunicatorGroupTest, CollectivesStayInsideTheGroup) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  auto comm = CreateCommunicator(CommBackend::kMpi, half, world_rank % 2 ? "odd" : "even",
                                 TestOptions(), Context::Cpu());
  MPI_Comm_free(&half);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<int> members;
  for (int r = world_rank % 2; r < world_size; r += 2) members.push_back(r);
  EXPECT_EQ((*comm)->world_ranks(), members);
  Tensor sum = TensorOf(DType::kI64, {static_cast<double>(world_rank)});
  (*comm)->AllReduce(sum, ReduceOp::kSum);
  EXPECT_EQ(ValuesOf(sum)[0], std::accumulate(members.begin(), members.end(), 0.0));
}

TEST(MpiCommunicatorGroupTest, RankDiscoveryReadsMpi) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const absl::StatusOr<RankInfo> info = DiscoverRank();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, world_rank);
  EXPECT_EQ(info->world_size, world_size);
  EXPECT_EQ(info->local_rank, world_rank);  // one node: local ranks are the world ranks
  EXPECT_EQ(info->source, "MPI");
}

// CUDA tensors through the MPI backend's host staging (several processes may share one GPU).
TEST(MpiCommunicatorCudaTest, StagesDeviceTensorsThroughTheHost) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const Context& ctx = kelvin::testing::ContextFor(Device::Cuda());
  auto comm = CreateCommunicator(CommBackend::kMpi, MPI_COMM_WORLD, "world", TestOptions(), ctx);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int rank = (*comm)->rank(), size = (*comm)->size();
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Tensor device =
        kelvin::testing::ToDevice(TensorOf(dtype, RankValues(dtype, rank, 0, 7)), Device::Cuda());
    (*comm)->AllReduce(device, ReduceOp::kSum);
    const std::vector<double> got = ValuesOf(CopyToDevice(ctx, device, Device::Cpu()));
    for (int64_t i = 0; i < 7; ++i) {
      std::vector<double> per_rank;
      for (int r = 0; r < size; ++r) per_rank.push_back(TestValue(dtype, r, i));
      EXPECT_EQ(got[static_cast<size_t>(i)], Reduced(dtype, ReduceOp::kSum, per_rank));
    }
    Tensor gathered = Tensor::Empty({size * 7}, dtype, Device::Cuda());
    (*comm)->AllGather(device, gathered);
    EXPECT_EQ(ValuesOf(CopyToDevice(ctx, gathered, Device::Cpu())).size(), size_t(size * 7));
  }
}

// The NCCL backend over the world, one GPU per rank (the GPU machine runs these with -np 1);
// skipped without a device or with more ranks than GPUs.
class NcclCommunicatorCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
    int world_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size > CudaDeviceCount()) {
      GTEST_SKIP() << "no CUDA device: NCCL needs one GPU per rank (" << world_size << " ranks, "
                   << CudaDeviceCount() << " devices)";
    }
    ctx = &kelvin::testing::ContextFor(Device::Cuda());
    absl::StatusOr<std::unique_ptr<Communicator>> created =
        CreateCommunicator(CommBackend::kNccl, MPI_COMM_WORLD, "world", TestOptions(), *ctx);
    ASSERT_TRUE(created.ok()) << created.status();
    comm = std::move(*created);
  }

  const Context* ctx = nullptr;  // the GPU's (set once a device is known to be there)
  std::unique_ptr<Communicator> comm;
};

TEST_F(NcclCommunicatorCudaTest, AllReduceAllGatherAndBroadcast) {
  const int rank = comm->rank(), size = comm->size();
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    SCOPED_TRACE(DTypeName(dtype));
    Tensor device = kelvin::testing::ToDevice(TensorOf(dtype, RankValues(dtype, rank, 0, 1001)),
                                              Device::Cuda());
    comm->AllReduce(device, ReduceOp::kSum);
    const std::vector<double> got = ValuesOf(CopyToDevice(*ctx, device, Device::Cpu()));
    for (int64_t i = 0; i < 1001; ++i) {
      std::vector<double> per_rank;
      for (int r = 0; r < size; ++r) per_rank.push_back(TestValue(dtype, r, i));
      ASSERT_EQ(got[static_cast<size_t>(i)], Reduced(dtype, ReduceOp::kSum, per_rank));
    }
    const Tensor input =
        kelvin::testing::ToDevice(TensorOf(dtype, RankValues(dtype, rank, 0, 7)), Device::Cuda());
    Tensor gathered = Tensor::Empty({size * 7}, dtype, Device::Cuda());
    comm->AllGather(input, gathered);
    std::vector<double> expected;
    for (int r = 0; r < size; ++r) {
      const std::vector<double> chunk = RankValues(dtype, r, 0, 7);
      expected.insert(expected.end(), chunk.begin(), chunk.end());
    }
    EXPECT_EQ(ValuesOf(CopyToDevice(*ctx, gathered, Device::Cpu())), expected);
    Tensor broadcast =
        kelvin::testing::ToDevice(TensorOf(dtype, RankValues(dtype, rank, 0, 7)), Device::Cuda());
    comm->Broadcast(broadcast, 0);
    EXPECT_EQ(ValuesOf(CopyToDevice(*ctx, broadcast, Device::Cpu())), RankValues(dtype, 0, 0, 7));
  }
  comm->Barrier();
}

// The non-blocking calls on device tensors run on the communication stream; Wait orders the
// compute stream after them.
TEST_F(NcclCommunicatorCudaTest, NonBlockingAllReduceAndUnevenReduceScatterAndAllGather) {
  const int rank = comm->rank(), size = comm->size();
  Tensor reduced = kelvin::testing::ToDevice(
      TensorOf(DType::kF32, RankValues(DType::kF32, rank, 0, 1001)), Device::Cuda());
  const std::vector<int64_t> counts = UnevenCounts(size, 50);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t begin = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
  const Tensor input = kelvin::testing::ToDevice(
      TensorOf(DType::kF32, RankValues(DType::kF32, rank, 0, total)), Device::Cuda());
  Tensor scattered =
      Tensor::Empty({counts[static_cast<size_t>(rank)]}, DType::kF32, Device::Cuda());
  std::unique_ptr<PendingCollective> all = comm->StartAllReduce(reduced, ReduceOp::kSum);
  std::unique_ptr<PendingCollective> uneven =
      comm->StartReduceScatterUneven(input, scattered, counts, ReduceOp::kSum);
  const Tensor own = kelvin::testing::ToDevice(
      TensorOf(DType::kBF16,
               RankValues(DType::kBF16, rank, 100, counts[static_cast<size_t>(rank)])),
      Device::Cuda());
  Tensor gathered = Tensor::Empty({total}, DType::kBF16, Device::Cuda());
  std::unique_ptr<PendingCollective> gather = comm->StartAllGatherUneven(own, gathered, counts);
  gather->Wait();
  uneven->Wait();
  all->Wait();
  EXPECT_EQ(ValuesOf(CopyToDevice(*ctx, gathered, Device::Cpu())),
            UnevenGathered(DType::kBF16, counts));
  auto sum_at = [&](int64_t i) {
    std::vector<double> per_rank;
    for (int r = 0; r < size; ++r) per_rank.push_back(TestValue(DType::kF32, r, i));
    return Reduced(DType::kF32, ReduceOp::kSum, per_rank);
  };
  const std::vector<double> got = ValuesOf(CopyToDevice(*ctx, reduced, Device::Cpu()));
  for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], sum_at(i));
  const std::vector<double> got_scattered = ValuesOf(CopyToDevice(*ctx, scattered, Device::Cpu()));
  for (int64_t i = 0; i < scattered.numel(); ++i) {
    ASSERT_EQ(got_scattered[static_cast<size_t>(i)], sum_at(begin + i));
  }
}

// The NCCL backend on host tensors (the trainer's scalars): staged through the device, results on
// the host, in f64 and i32 as the trainer reduces them.
TEST_F(NcclCommunicatorCudaTest, StagesHostTensorsThroughTheDevice) {
  const int rank = comm->rank(), size = comm->size();
  for (const DType dtype : {DType::kF64, DType::kI32}) {
    SCOPED_TRACE(DTypeName(dtype));
    Tensor host = TensorOf(dtype, RankValues(dtype, rank, 0, 5));
    comm->AllReduce(host, ReduceOp::kMax);
    ASSERT_TRUE(host.is_cpu());
    const std::vector<double> got = ValuesOf(host);
    for (int64_t i = 0; i < 5; ++i) {
      std::vector<double> per_rank;
      for (int r = 0; r < size; ++r) per_rank.push_back(TestValue(dtype, r, i));
      EXPECT_EQ(got[static_cast<size_t>(i)], Reduced(dtype, ReduceOp::kMax, per_rank));
    }
    Tensor gathered = Tensor::Empty({size * 5}, dtype);
    comm->AllGather(TensorOf(dtype, RankValues(dtype, rank, 0, 5)), gathered);
    std::vector<double> expected;
    for (int r = 0; r < size; ++r) {
      const std::vector<double> chunk = RankValues(dtype, r, 0, 5);
      expected.insert(expected.end(), chunk.begin(), chunk.end());
    }
    EXPECT_EQ(ValuesOf(gathered), expected);
  }
}

}  // namespace
}  // namespace kelvin::parallel
