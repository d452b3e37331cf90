// Communicator naming, the non-blocking calls run at once, the scalar all-reduce and the agreements
// on a status.
#include "parallel/comm/communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"

namespace kelvin::parallel {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  KELVIN_FATAL() << "unknown ReduceOp " << static_cast<int>(op);
}

Communicator::Communicator(std::string role, int rank, std::vector<int> world_ranks)
    : rank_(rank), world_ranks_(std::move(world_ranks)), name_(GroupName(role, world_ranks_)) {
  KELVIN_CHECK(rank_ >= 0 && rank_ < size()) << "rank " << rank_ << " of " << name_;
}

std::string GroupName(std::string_view role, const std::vector<int>& world_ranks) {
  constexpr size_t kShownMembers = 8;
  if (world_ranks.size() <= kShownMembers) {
    return absl::StrCat(std::string(role), "[", absl::StrJoin(world_ranks, ","), "]");
  }
  const std::vector<int> shown(world_ranks.begin(), world_ranks.begin() + kShownMembers);
  return absl::StrCat(std::string(role), "[", absl::StrJoin(shown, ","), ",...(",
                      world_ranks.size(), " ranks)]");
}

namespace {

class CompletedCollective final : public PendingCollective {
 public:
  void Wait() override {}
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::StartAllReduce(Tensor& tensor, ReduceOp op) {
  AllReduce(tensor, op);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::StartReduceScatterUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts, ReduceOp op) {
  ReduceScatterUneven(input, output, counts, op);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::StartAllGatherUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) {
  AllGatherUneven(input, output, counts);
  return std::make_unique<CompletedCollective>();
}

void CheckUnevenSplit(const Communicator& group, const Tensor& whole, const Tensor& chunk,
                      const std::vector<int64_t>& counts, std::string_view call) {
  int64_t total = 0;
  for (const int64_t count : counts) {
    KELVIN_CHECK(count >= 0) << call << " on " << group.name() << ": count " << count;
    total += count;
  }
  KELVIN_CHECK(static_cast<int>(counts.size()) == group.size() && total == whole.numel() &&
               chunk.numel() == counts[static_cast<size_t>(group.rank())] &&
               chunk.dtype() == whole.dtype() && chunk.device() == whole.device())
      << call << " on " << group.name() << " between " << whole.ToString() << " and this rank's "
      << chunk.ToString() << " with " << counts.size() << " counts summing to " << total
      << ": needs one count per member, summing to the whole's elements, and a chunk of this "
         "rank's count in the whole's dtype on its device";
}

double Communicator::AllReduceScalar(double value, ReduceOp op) {
  Tensor scalar = Tensor::Empty({1}, DType::kF64);
  scalar.data<double>()[0] = value;
  AllReduce(scalar, op);
  return scalar.data<double>()[0];
}

namespace {

// Every member's status code, by group rank (0 where it is OK). Collective over `group`.
std::vector<int32_t> GatherStatusCodes(Communicator& group, const absl::Status& status) {
  Tensor mine = Tensor::Empty({1}, DType::kI32);
  mine.data<int32_t>()[0] = static_cast<int32_t>(status.code());
  Tensor codes = Tensor::Empty({group.size()}, DType::kI32);  // [size]
  group.AllGather(mine, codes);
  return {codes.data<int32_t>(), codes.data<int32_t>() + group.size()};
}

}  // namespace

absl::Status AgreeOnStatus(Communicator& group, const absl::Status& status, std::string_view what) {
  const std::vector<int32_t> codes = GatherStatusCodes(group, status);
  std::vector<int> failed;
  for (int r = 0; r < group.size(); ++r) {
    if (codes[static_cast<size_t>(r)] != 0) failed.push_back(r);
  }
  if (!status.ok() || failed.empty()) return status;
  return absl::AbortedError(absl::StrCat(
      std::string(what), " failed on rank", failed.size() > 1 ? "s " : " ",
      absl::StrJoin(failed, ", "), " of ", group.name(), " (its own message says why)"));
}

absl::Status ShareFirstFailure(Communicator& group, const absl::Status& status) {
  const std::vector<int32_t> codes = GatherStatusCodes(group, status);
  const auto failing = std::find_if(codes.begin(), codes.end(), [](int32_t c) { return c != 0; });
  if (failing == codes.end()) return absl::OkStatus();
  const int first = static_cast<int>(failing - codes.begin());
  // The first failing rank's message: its length, then its bytes packed 4 to an int32.
  const absl::string_view own = status.message();
  Tensor length = Tensor::Empty({1}, DType::kI64);
  length.data<int64_t>()[0] =
      std::min<int64_t>(static_cast<int64_t>(own.size()), kSharedMessageBytes);
  group.Broadcast(length, first);
  const int64_t bytes = length.data<int64_t>()[0];
  Tensor packed = Tensor::ZerosCpu({(bytes + 3) / 4}, DType::kI32);  // [ceil(bytes / 4)]
  if (group.rank() == first) std::memcpy(packed.raw_data(), own.data(), static_cast<size_t>(bytes));
  group.Broadcast(packed, first);
  const absl::Status shared(
      static_cast<absl::StatusCode>(*failing),
      std::string(static_cast<const char*>(packed.raw_data()), static_cast<size_t>(bytes)));
  if (!status.ok() && group.rank() != first) {
    KLOG(ERROR) << "this rank failed too (group " << group.name() << " goes on with rank " << first
                << "'s error): " << status;
  }
  return shared;
}

}  // namespace kelvin::parallel
