// The MPI backend: non-blocking MPI calls polled against a deadline, arrival notices for naming
// the ranks that did not arrive, bf16 reductions widened to f32, host staging of CUDA tensors, and
// the non-blocking forms that a Wait completes.
#include "parallel/comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/copy.h"
#include "core/logging.h"
#include "core/mpi_check.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/comm/liveness_probe.h"
#include "parallel/comm/stop_deadline.h"

namespace kelvin::parallel {

enum class MpiCommunicator::CallKind : int64_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
  kCreate,
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kArrivalTag = 1;  // on arrival_comm_
constexpr int kDataTag = 2;     // point-to-point transfers on data_comm_

std::string_view CallKindName(int64_t kind) {
  static constexpr std::string_view kNames[] = {
      "AllReduce", "AllGather", "ReduceScatter",
      "Broadcast", "AllToAll",  "Barrier",
      "Send",      "Recv",      "MPI_Comm_idup (creating the communicator)"};
  if (kind < 0 || kind >= static_cast<int64_t>(std::size(kNames))) return "an unknown call";
  return kNames[kind];
}

// The MPI type moving (or, for reductions, reducing) elements of `dtype`; bf16 moves as its bits.
MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
  }
  KELVIN_FATAL() << "no MPI type for dtype " << static_cast<int>(dtype);
}

MPI_Op MpiOp(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

int MpiCount(int64_t elements) {
  KELVIN_CHECK(elements <= INT_MAX) << elements << " elements exceed one MPI call's int count";
  return static_cast<int>(elements);
}

void CheckReduction(const Tensor& tensor, ReduceOp op, std::string_view call) {
  KELVIN_CHECK(op != ReduceOp::kAvg || IsFloating(tensor.dtype()))
      << call << "(avg) of " << tensor.ToString() << ": avg is for floating types only";
}

void CheckPair(const Tensor& input, const Tensor& output, int64_t output_elements,
               std::string_view call) {
  KELVIN_CHECK(input.dtype() == output.dtype() && input.device() == output.device() &&
               output.numel() == output_elements)
      << call << " from " << input.ToString() << " to " << output.ToString() << ": the output "
      << "needs " << output_elements << " elements of the input's dtype on its device";
}

// [n] bf16 -> [n] f32, exactly.
Tensor WidenToF32(const Tensor& host_bf16) {
  Tensor wide = Tensor::Empty(host_bf16.shape(), DType::kF32);
  const bf16* in = host_bf16.data<bf16>();
  float* out = wide.data<float>();
  for (int64_t i = 0; i < host_bf16.numel(); ++i) out[i] = static_cast<float>(in[i]);
  return wide;
}

// [n] f32 -> [n] bf16, rounding to nearest even.
void NarrowToBf16(const Tensor& host_f32, Tensor& host_bf16) {
  const float* in = host_f32.data<float>();
  bf16* out = host_bf16.data<bf16>();
  for (int64_t i = 0; i < host_f32.numel(); ++i) out[i] = bf16(in[i]);
}

void DivideInPlace(Tensor& host, int divisor) {
  if (host.dtype() == DType::kF64) {
    double* values = host.data<double>();
    for (int64_t i = 0; i < host.numel(); ++i) values[i] /= divisor;
  } else {
    float* values = host.data<float>();
    for (int64_t i = 0; i < host.numel(); ++i) values[i] /= static_cast<float>(divisor);
  }
}

// How a wait ended.
enum class WaitResult { kDone, kTimedOut, kStopped };

// Polls `requests` until all complete, `deadline` passes, or a stop signal's grace ran out
// (parallel/comm/stop_deadline.h); answers liveness probes meanwhile; yields the core while waiting
// (ranks are often oversubscribed in tests) and sleeps briefly once a wait grows long.
// `longest_pause` grows to the longest time between two polls: this process itself stopped
// (SIGSTOP, a debugger) or starved of CPU.
WaitResult WaitAllUntil(std::vector<MPI_Request>& requests, Clock::time_point deadline,
                        Clock::duration& longest_pause) {
  Clock::time_point last_poll = Clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    KELVIN_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                                 MPI_STATUSES_IGNORE));
    if (done) return WaitResult::kDone;
    ServeEveryProbe();
    const Clock::time_point now = Clock::now();
    longest_pause = std::max(longest_pause, now - last_poll);
    last_poll = now;
    if (now >= deadline) return WaitResult::kTimedOut;
    if (StopDeadlinePassed(nullptr)) return WaitResult::kStopped;
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

Clock::time_point DeadlineAfter(Clock::time_point start, double seconds) {
  return start +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// WaitAllUntil `deadline`; `ask_before` it, the liveness questions go out through `probe`
// (AskAround), so that their answers are in when it passes: the whole wait stays the timeout's.
WaitResult WaitAsking(std::vector<MPI_Request>& requests, Clock::time_point deadline,
                      Clock::duration ask_before, LivenessProbe& probe,
                      Clock::duration& longest_pause) {
  const WaitResult early = WaitAllUntil(requests, deadline - ask_before, longest_pause);
  if (early != WaitResult::kTimedOut) return early;
  AskAround(probe);
  return WaitAllUntil(requests, deadline, longest_pause);
}

int RankIn(MPI_Comm comm) {
  int rank = 0;
  KELVIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

// "; world rank(s) 3 do not answer (...)" for the world ranks `silent` (UnansweredAround), else
// "".
std::string UnansweredText(const std::vector<int>& silent) {
  if (silent.empty()) return "";
  return absl::StrCat("; world rank(s) ", absl::StrJoin(silent, ","),
                      " do not answer (stopped, e.g. by SIGSTOP or a debugger, dead, or stuck "
                      "outside communication: see their logs)");
}

}  // namespace

struct MpiCommunicator::Call {
  CallKind kind;
  std::string detail;  // "sum", "root 0", "to group rank 1": printed in parentheses
  int64_t elements;    // this rank's input elements; the same on every rank for collectives
  DType dtype;
  int64_t sequence = 0;  // collectives: the call's number on this communicator, from 1

  std::string Describe() const {
    std::string text(CallKindName(static_cast<int64_t>(kind)));
    if (!detail.empty()) absl::StrAppend(&text, "(", detail, ")");
    if (sequence > 0) absl::StrAppend(&text, " #", sequence);
    if (kind != CallKind::kBarrier && kind != CallKind::kCreate) {
      absl::StrAppend(&text, " of ", elements, " ", std::string(DTypeName(dtype)), " elements");
    }
    return text;
  }
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string_view role,
                                 const CommunicatorOptions& options, const Context& ctx)
    : Communicator(std::string(role), RankIn(comm), WorldRanksOf(comm)),
      options_(options),
      ctx_(ctx) {
  KELVIN_CHECK(options_.timeout_seconds > 0) << name() << ": timeout " << options_.timeout_seconds;
  data_comm_ = DuplicateWithErrorsReturned(comm);
  arrival_comm_ = DuplicateWithErrorsReturned(comm);
  probe_comm_ = DuplicateWithErrorsReturned(comm);
  probe_ = std::make_unique<LivenessProbe>(probe_comm_, world_ranks());
}

MPI_Comm MpiCommunicator::DuplicateWithErrorsReturned(MPI_Comm comm) {
  MPI_Comm copy = MPI_COMM_NULL;
  std::vector<MPI_Request> request(1);
  KELVIN_MPI_CHECK(MPI_Comm_idup(comm, &copy, &request[0]));
  const Clock::time_point start = Clock::now();
  Clock::duration pause{};
  const WaitResult waited =
      WaitAllUntil(request, DeadlineAfter(start, options_.timeout_seconds), pause);
  if (waited != WaitResult::kDone) {
    AbortOnTimeout({CallKind::kCreate, "", 0, DType::kF32}, Clock::now() - start,
                   waited == WaitResult::kStopped
                       ? StoppedText()
                       : "not every member arrived (which ones is not known before the "
                         "communicator exists; see the logs of the ranks named in the group)");
  }
  KELVIN_MPI_CHECK(MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN));
  return copy;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  probe_.reset();
  if (finalized) return;  // MPI freed every communicator already
  KELVIN_MPI_CHECK(MPI_Comm_free(&data_comm_));
  KELVIN_MPI_CHECK(MPI_Comm_free(&arrival_comm_));
  KELVIN_MPI_CHECK(MPI_Comm_free(&probe_comm_));
}

Tensor MpiCommunicator::ToHost(const Tensor& tensor) const {
  return tensor.is_cpu() ? tensor : CopyToDevice(ctx_, tensor, Device::Cpu());
}

void MpiCommunicator::FromHost(const Tensor& host, Tensor& tensor) const {
  if (!host.SameStorage(tensor)) CopyTensor(ctx_, host, tensor);
}

// Arrival notices: before collective call #n each rank posts a receive for, and sends, a small
// {n, kind, elements} notice to every other member on a duplicate of the group's communicator.
// Notices are always matched and completed (a collective that completes implies that every member
// sent its notice), so none is left behind. On timeout a rank tests its posted receives
// (DescribeArrivals): the members whose notice #n has not come did not arrive; a notice of another
// kind or count means a member is in a different call. Each call in flight owns its notices, so
// several may be outstanding on one communicator.
struct MpiCommunicator::InFlight {
  Call call;
  std::array<int64_t, 3> notice{};              // {sequence, CallKind, elements} sent to peers
  std::vector<std::array<int64_t, 3>> arrived;  // [size()] the notices received, by group rank
  std::vector<MPI_Request> arrivals;            // [size() - 1 receives, then size() - 1 sends]
  std::vector<MPI_Request> transfers;
  Clock::time_point start;
  std::function<void()> finish;  // after completion: the result into the caller's tensor
};

std::unique_ptr<MpiCommunicator::InFlight> MpiCommunicator::StartCollective(
    Call call, const std::function<void(std::vector<MPI_Request>&)>& post) {
  auto flight = std::make_unique<InFlight>();
  call.sequence = ++sequence_;
  flight->notice = {call.sequence, static_cast<int64_t>(call.kind), call.elements};
  flight->call = std::move(call);
  flight->arrived.resize(static_cast<size_t>(size()));
  for (int peer = 0; peer < size(); ++peer) {  // the receives by ascending peer
    if (peer == rank()) continue;
    KELVIN_MPI_CHECK(MPI_Irecv(flight->arrived[static_cast<size_t>(peer)].data(), 3, MPI_INT64_T,
                               peer, kArrivalTag, arrival_comm_, &flight->arrivals.emplace_back()));
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    KELVIN_MPI_CHECK(MPI_Isend(flight->notice.data(), 3, MPI_INT64_T, peer, kArrivalTag,
                               arrival_comm_, &flight->arrivals.emplace_back()));
  }
  post(flight->transfers);
  flight->start = Clock::now();
  return flight;
}

void MpiCommunicator::CompleteCollective(InFlight& flight) {
  const Call& call = flight.call;
  const Clock::time_point deadline = DeadlineAfter(flight.start, options_.timeout_seconds);
  Clock::duration pause{};
  WaitResult waited = WaitAsking(flight.transfers, deadline, ProbeGrace(), *probe_, pause);
  if (waited == WaitResult::kDone) {
    waited = WaitAsking(flight.arrivals, deadline, ProbeGrace(), *probe_, pause);
  }
  if (waited == WaitResult::kStopped) {
    AbortOnTimeout(call, Clock::now() - flight.start, StoppedText());
  }
  if (waited == WaitResult::kTimedOut) {
    AbortOnTimeout(call, Clock::now() - flight.start,
                   PausedTooLong(pause) ? PausedText(pause) : DescribeArrivals(flight));
  }
  for (int peer = 0; peer < size(); ++peer) {
    const std::array<int64_t, 3>& notice = flight.arrived[static_cast<size_t>(peer)];
    KELVIN_CHECK(peer == rank() || notice == flight.notice)
        << "mismatched collectives in group " << name() << ": this rank (world "
        << world_ranks()[static_cast<size_t>(rank())] << ") made " << call.Describe()
        << " while world rank " << world_ranks()[static_cast<size_t>(peer)] << " made "
        << CallKindName(notice[1]) << " #" << notice[0] << " of " << notice[2]
        << " elements; every member must make the same calls in the same order";
  }
  if (flight.finish) flight.finish();
}

void MpiCommunicator::RunCollective(Call call,
                                    const std::function<void(std::vector<MPI_Request>&)>& post) {
  CompleteCollective(*StartCollective(std::move(call), post));
}

// A non-blocking collective: completed (and checked) by Wait, or by the destructor.
class MpiCommunicator::Pending final : public PendingCollective {
 public:
  Pending(MpiCommunicator& comm, std::unique_ptr<InFlight> flight)
      : comm_(comm), flight_(std::move(flight)) {}
  ~Pending() override { Wait(); }
  void Wait() override {
    if (flight_ == nullptr) return;
    comm_.CompleteCollective(*flight_);
    flight_.reset();
  }
  void Progress() override {
    if (flight_ == nullptr) return;
    int done = 0;  // testing lets MPI's progress engine advance every pending operation
    KELVIN_MPI_CHECK(MPI_Testall(static_cast<int>(flight_->transfers.size()),
                                 flight_->transfers.data(), &done, MPI_STATUSES_IGNORE));
    ServeEveryProbe();
  }

 private:
  MpiCommunicator& comm_;
  std::unique_ptr<InFlight> flight_;
};

std::string MpiCommunicator::DescribeArrivals(InFlight& flight) {
  const Call& call = flight.call;
  const std::vector<int> silent = UnansweredAround(*probe_);
  const auto answers = [&](int world_rank) {
    return !std::binary_search(silent.begin(), silent.end(), world_rank);
  };
  std::vector<int> missing;
  std::vector<std::string> elsewhere;
  size_t receive = 0;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    int arrived = 0;
    KELVIN_MPI_CHECK(MPI_Test(&flight.arrivals[receive++], &arrived, MPI_STATUS_IGNORE));
    const int world_rank = world_ranks()[static_cast<size_t>(peer)];
    const std::array<int64_t, 3>& notice = flight.arrived[static_cast<size_t>(peer)];
    if (!arrived) {
      missing.push_back(world_rank);
    } else if (notice != flight.notice) {
      elsewhere.push_back(absl::StrCat("world rank ", world_rank, " is in ",
                                       std::string(CallKindName(notice[1])), " #", notice[0],
                                       " of ", notice[2], " elements"));
    }
  }
  std::string text;
  if (!missing.empty()) {
    // Members that answer wait in another call: for the processes that do not answer, if any.
    const bool all_answer = std::all_of(missing.begin(), missing.end(), answers);
    absl::StrAppend(&text, "world rank(s) ", absl::StrJoin(missing, ","), " did not arrive at ",
                    call.Describe(),
                    all_answer && !silent.empty()
                        ? " (they answer: they wait in another call)"
                        : " (dead, hung, or busy elsewhere: see their logs)");
  }
  if (!elsewhere.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : "; ",
                    "mismatched calls: ", absl::StrJoin(elsewhere, "; "));
  }
  if (!text.empty()) return text + UnansweredText(silent);
  // Every member arrived: one that does not answer is stopped or stuck; the others wait here.
  std::vector<int> stuck_here;
  for (const int world_rank : world_ranks()) {
    if (!answers(world_rank)) stuck_here.push_back(world_rank);
  }
  if (silent.empty()) {
    return "every member arrived and answers, yet the transfer did not complete (MPI/network)";
  }
  if (stuck_here.empty()) {  // the members wait for a process outside the group
    return absl::StrCat("every member arrived at ", call.Describe(),
                        " but it did not complete, and the job's",
                        UnansweredText(silent).substr(1));
  }
  return absl::StrCat("world rank(s) ", absl::StrJoin(stuck_here, ","), " arrived at ",
                      call.Describe(), " but did not finish it", UnansweredText(silent));
}

Clock::duration MpiCommunicator::ProbeGrace() const {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(5.0, options_.timeout_seconds / 4)));
}

bool MpiCommunicator::PausedTooLong(Clock::duration pause) const { return pause > ProbeGrace(); }

std::string MpiCommunicator::PausedText(Clock::duration pause) const {
  return absl::StrFormat(
      "this process itself was paused for %.1f s while it waited (stopped by SIGSTOP or a "
      "debugger, or starved of CPU): the timeout passed meanwhile, and who stopped the job is in "
      "the other ranks' messages",
      std::chrono::duration<double>(pause).count());
}

Clock::duration MpiCommunicator::AbortLinger() const {
  return std::min<Clock::duration>(ProbeGrace(), std::chrono::seconds(1));
}

std::string MpiCommunicator::StoppedText() const {
  double since = 0;
  StopDeadlinePassed(&since);
  return absl::StrFormat(
      "a stop signal came %.1f s ago (the grace is %.0f s) and the call has not completed: a rank "
      "is gone (srun --kill-on-bad-exit signals the others when one fails; see the first failing "
      "rank's log)",
      since, StopGraceSeconds());
}

void MpiCommunicator::AbortOnTimeout(const Call& call, Clock::duration waited,
                                     const std::string& who_is_missing) {
  KLOG(ERROR) << "communication timeout: " << call.Describe() << " in group " << name()
              << " (this is group rank " << rank() << ", world rank "
              << world_ranks()[static_cast<size_t>(rank())] << ") did not complete after "
              << absl::StrFormat("%.1f", std::chrono::duration<double>(waited).count())
              << " s (timeout " << options_.timeout_seconds << " s): " << who_is_missing
              << ". Aborting the job (parallel.collective_timeout_seconds sets the timeout).";
  std::fflush(stderr);
  ServeProbesFor(AbortLinger());  // the members still asking hear from this one first
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this is for the compiler
}

void MpiCommunicator::RunPointToPoint(const Call& call, int peer,
                                      const std::function<void(MPI_Request&)>& post) {
  KELVIN_CHECK(peer >= 0 && peer < size() && peer != rank())
      << call.Describe() << " in group " << name() << ": peer " << peer << " is not another member";
  std::vector<MPI_Request> request(1);
  post(request[0]);
  const Clock::time_point start = Clock::now();
  Clock::duration pause{};
  const WaitResult waited = WaitAsking(request, DeadlineAfter(start, options_.timeout_seconds),
                                       ProbeGrace(), *probe_, pause);
  if (waited == WaitResult::kStopped) AbortOnTimeout(call, Clock::now() - start, StoppedText());
  if (waited == WaitResult::kTimedOut && PausedTooLong(pause)) {
    AbortOnTimeout(call, Clock::now() - start, PausedText(pause));
  }
  if (waited == WaitResult::kTimedOut) {
    const int world_peer = world_ranks()[static_cast<size_t>(peer)];
    AbortOnTimeout(call, Clock::now() - start,
                   absl::StrCat("world rank ", world_peer, " did not post the matching ",
                                call.kind == CallKind::kSend ? "Recv" : "Send",
                                " (dead, hung, or busy elsewhere: see its log)",
                                UnansweredText(UnansweredAround(*probe_))));
  }
}

std::unique_ptr<MpiCommunicator::InFlight> MpiCommunicator::StartAllReduceCall(Tensor& tensor,
                                                                               ReduceOp op) {
  CheckReduction(tensor, op, "AllReduce");
  Tensor host = ToHost(tensor);                                             // [n]
  Tensor reduced = host.dtype() == DType::kBF16 ? WidenToF32(host) : host;  // [n]
  const int count = MpiCount(reduced.numel());
  std::unique_ptr<InFlight> flight = StartCollective(
      {CallKind::kAllReduce, std::string(ReduceOpName(op)), tensor.numel(), tensor.dtype()},
      [&](std::vector<MPI_Request>& requests) {
        KELVIN_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, reduced.raw_data(), count,
                                        MpiType(reduced.dtype()), MpiOp(op), data_comm_,
                                        &requests.emplace_back()));
      });
  flight->finish = [this, op, host, reduced, tensor]() mutable {
    if (op == ReduceOp::kAvg) DivideInPlace(reduced, size());
    if (host.dtype() == DType::kBF16) NarrowToBf16(reduced, host);
    FromHost(host, tensor);
  };
  return flight;
}

void MpiCommunicator::AllReduce(Tensor& tensor, ReduceOp op) {
  CompleteCollective(*StartAllReduceCall(tensor, op));
}

std::unique_ptr<PendingCollective> MpiCommunicator::StartAllReduce(Tensor& tensor, ReduceOp op) {
  return std::make_unique<Pending>(*this, StartAllReduceCall(tensor, op));
}

std::unique_ptr<MpiCommunicator::InFlight> MpiCommunicator::StartReduceScatterUnevenCall(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts, ReduceOp op) {
  CheckReduction(input, op, "ReduceScatterUneven");
  CheckUnevenSplit(*this, input, output, counts, "ReduceScatterUneven");
  const bool widen = input.dtype() == DType::kBF16;
  const Tensor host_input = ToHost(input);                                   // [sum counts]
  const Tensor reduced_input = widen ? WidenToF32(host_input) : host_input;  // [sum counts]
  Tensor host_output = output.is_cpu() ? output : Tensor::Empty(output.shape(), output.dtype());
  Tensor reduced = widen ? Tensor::Empty(output.shape(), DType::kF32) : host_output;  // [count]
  auto receive_counts = std::make_shared<std::vector<int>>();  // alive until the call completes
  for (const int64_t count : counts) receive_counts->push_back(MpiCount(count));
  std::unique_ptr<InFlight> flight = StartCollective(
      {CallKind::kReduceScatter, std::string(ReduceOpName(op)) + ", uneven", input.numel(),
       input.dtype()},
      [&](std::vector<MPI_Request>& requests) {
        KELVIN_MPI_CHECK(MPI_Ireduce_scatter(reduced_input.raw_data(), reduced.raw_data(),
                                             receive_counts->data(), MpiType(reduced.dtype()),
                                             MpiOp(op), data_comm_, &requests.emplace_back()));
      });
  flight->finish = [this, op, widen, reduced_input, reduced, host_output, output,
                    receive_counts]() mutable {
    if (op == ReduceOp::kAvg) DivideInPlace(reduced, size());
    if (widen) NarrowToBf16(reduced, host_output);
    FromHost(host_output, output);
  };
  return flight;
}

void MpiCommunicator::ReduceScatterUneven(const Tensor& input, Tensor& output,
                                          const std::vector<int64_t>& counts, ReduceOp op) {
  CompleteCollective(*StartReduceScatterUnevenCall(input, output, counts, op));
}

std::unique_ptr<PendingCollective> MpiCommunicator::StartReduceScatterUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts, ReduceOp op) {
  return std::make_unique<Pending>(*this, StartReduceScatterUnevenCall(input, output, counts, op));
}

std::unique_ptr<MpiCommunicator::InFlight> MpiCommunicator::StartAllGatherUnevenCall(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) {
  CheckUnevenSplit(*this, output, input, counts, "AllGatherUneven");
  const Tensor host_input = ToHost(input);  // [counts[rank]]
  Tensor host_output = output.is_cpu() ? output : Tensor::Empty(output.shape(), output.dtype());
  // [size()] each member's count and offset, alive until the call completes.
  auto receive_counts = std::make_shared<std::vector<int>>();
  auto offsets = std::make_shared<std::vector<int>>();
  int64_t offset = 0;
  for (const int64_t count : counts) {
    receive_counts->push_back(MpiCount(count));
    offsets->push_back(MpiCount(offset));
    offset += count;
  }
  std::unique_ptr<InFlight> flight = StartCollective(
      {CallKind::kAllGather, "uneven", output.numel(), output.dtype()},
      [&](std::vector<MPI_Request>& requests) {
        KELVIN_MPI_CHECK(MPI_Iallgatherv(
            host_input.raw_data(), MpiCount(host_input.numel()), MpiType(input.dtype()),
            host_output.raw_data(), receive_counts->data(), offsets->data(),
            MpiType(output.dtype()), data_comm_, &requests.emplace_back()));
      });
  flight->finish = [this, host_input, host_output, output, receive_counts, offsets]() mutable {
    FromHost(host_output, output);
  };
  return flight;
}

void MpiCommunicator::AllGatherUneven(const Tensor& input, Tensor& output,
                                      const std::vector<int64_t>& counts) {
  CompleteCollective(*StartAllGatherUnevenCall(input, output, counts));
}

std::unique_ptr<PendingCollective> MpiCommunicator::StartAllGatherUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) {
  return std::make_unique<Pending>(*this, StartAllGatherUnevenCall(input, output, counts));
}

void MpiCommunicator::AllGather(const Tensor& input, Tensor& output) {
  CheckPair(input, output, input.numel() * size(), "AllGather");
  const Tensor host_input = ToHost(input);  // [n]
  Tensor host_output = output.is_cpu() ? output
                                       : Tensor::Empty(output.shape(),  // [size * n]
                                                       output.dtype());
  const int count = MpiCount(input.numel());
  RunCollective({CallKind::kAllGather, "", input.numel(), input.dtype()},
                [&](std::vector<MPI_Request>& requests) {
                  KELVIN_MPI_CHECK(MPI_Iallgather(
                      host_input.raw_data(), count, MpiType(input.dtype()), host_output.raw_data(),
                      count, MpiType(input.dtype()), data_comm_, &requests.emplace_back()));
                });
  FromHost(host_output, output);
}

void MpiCommunicator::ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) {
  CheckReduction(input, op, "ReduceScatter");
  KELVIN_CHECK_EQ(input.numel() % size(), 0) << "ReduceScatter input " << input.ToString()
                                             << " does not split into " << size() << " chunks";
  CheckPair(input, output, input.numel() / size(), "ReduceScatter");
  const bool widen = input.dtype() == DType::kBF16;
  const Tensor host_input = ToHost(input);                                   // [size * n]
  const Tensor reduced_input = widen ? WidenToF32(host_input) : host_input;  // [size * n]
  Tensor host_output = output.is_cpu() ? output : Tensor::Empty(output.shape(), output.dtype());
  Tensor reduced = widen ? Tensor::Empty(output.shape(), DType::kF32) : host_output;  // [n]
  const int count = MpiCount(output.numel());
  RunCollective(
      {CallKind::kReduceScatter, std::string(ReduceOpName(op)), input.numel(), input.dtype()},
      [&](std::vector<MPI_Request>& requests) {
        KELVIN_MPI_CHECK(MPI_Ireduce_scatter_block(reduced_input.raw_data(), reduced.raw_data(),
                                                   count, MpiType(reduced.dtype()), MpiOp(op),
                                                   data_comm_, &requests.emplace_back()));
      });
  if (op == ReduceOp::kAvg) DivideInPlace(reduced, size());
  if (widen) NarrowToBf16(reduced, host_output);
  FromHost(host_output, output);
}

void MpiCommunicator::Broadcast(Tensor& tensor, int root) {
  KELVIN_CHECK(root >= 0 && root < size()) << "Broadcast root " << root << " in group " << name();
  // The root sends its values; the others receive into a host buffer (staged) or in place.
  Tensor host = (tensor.is_cpu() || rank() == root)
                    ? ToHost(tensor)
                    : Tensor::Empty(tensor.shape(), tensor.dtype());  // [n]
  const int count = MpiCount(tensor.numel());
  RunCollective({CallKind::kBroadcast, absl::StrCat("root ", root), tensor.numel(), tensor.dtype()},
                [&](std::vector<MPI_Request>& requests) {
                  KELVIN_MPI_CHECK(MPI_Ibcast(host.raw_data(), count, MpiType(tensor.dtype()), root,
                                              data_comm_, &requests.emplace_back()));
                });
  if (rank() != root) FromHost(host, tensor);
}

void MpiCommunicator::Send(const Tensor& tensor, int peer) {
  const Tensor host = ToHost(tensor);  // [n]
  RunPointToPoint(
      {CallKind::kSend, absl::StrCat("to group rank ", peer), tensor.numel(), tensor.dtype()}, peer,
      [&](MPI_Request& request) {
        KELVIN_MPI_CHECK(MPI_Isend(host.raw_data(), MpiCount(tensor.numel()),
                                   MpiType(tensor.dtype()), peer, kDataTag, data_comm_, &request));
      });
}

void MpiCommunicator::Recv(Tensor& tensor, int peer) {
  Tensor host = tensor.is_cpu() ? tensor : Tensor::Empty(tensor.shape(), tensor.dtype());  // [n]
  RunPointToPoint(
      {CallKind::kRecv, absl::StrCat("from group rank ", peer), tensor.numel(), tensor.dtype()},
      peer, [&](MPI_Request& request) {
        KELVIN_MPI_CHECK(MPI_Irecv(host.raw_data(), MpiCount(tensor.numel()),
                                   MpiType(tensor.dtype()), peer, kDataTag, data_comm_, &request));
      });
  FromHost(host, tensor);
}

void MpiCommunicator::AllToAll(const Tensor& input, Tensor& output) {
  CheckPair(input, output, input.numel(), "AllToAll");
  KELVIN_CHECK_EQ(input.numel() % size(), 0)
      << "AllToAll input " << input.ToString() << " does not split into " << size() << " chunks";
  const Tensor host_input = ToHost(input);  // [size * n]
  Tensor host_output = output.is_cpu() ? output : Tensor::Empty(output.shape(), output.dtype());
  const int chunk = MpiCount(input.numel() / size());
  RunCollective({CallKind::kAllToAll, "", input.numel(), input.dtype()},
                [&](std::vector<MPI_Request>& requests) {
                  KELVIN_MPI_CHECK(MPI_Ialltoall(
                      host_input.raw_data(), chunk, MpiType(input.dtype()), host_output.raw_data(),
                      chunk, MpiType(input.dtype()), data_comm_, &requests.emplace_back()));
                });
  FromHost(host_output, output);
}

void MpiCommunicator::Barrier() {
  RunCollective({CallKind::kBarrier, "", 0, DType::kF32}, [&](std::vector<MPI_Request>& requests) {
    KELVIN_MPI_CHECK(MPI_Ibarrier(data_comm_, &requests.emplace_back()));
  });
}

}  // namespace kelvin::parallel
