// The NCCL backend: bootstrap over MPI, stream ordering by events (deferred for the non-blocking
// calls), and the watchdog thread that turns a hang or an asynchronous NCCL error into a clear
// message and a job abort.
#include "parallel/comm/nccl_communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/logging.h"
#include "core/ops/elementwise.h"
#include "parallel/comm/mpi_communicator.h"

namespace kelvin::parallel {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
  }
  KELVIN_FATAL() << "no NCCL type for dtype " << static_cast<int>(dtype);
}

ncclRedOp_t NcclOp(ReduceOp op, DType dtype) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      KELVIN_CHECK(IsFloating(dtype)) << "avg of " << DTypeName(dtype) << ": floating types only";
      return ncclAvg;
  }
  KELVIN_FATAL() << "unknown ReduceOp " << static_cast<int>(op);
}

void* ChunkOf(const Tensor& tensor, int64_t chunk, int64_t chunk_elements) {
  return static_cast<char*>(tensor.raw_data()) +
         static_cast<size_t>(chunk * chunk_elements) * DTypeSize(tensor.dtype());
}

// Ends the job after a fatal communication problem, from the watchdog thread: MPI_Abort when MPI
// allows calls from any thread, else exiting non-zero (mpirun, and srun --kill-on-bad-exit, then
// end the other ranks; those still waiting time out on their own).
[[noreturn]] void AbortJob() {
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&thread_level);
  if (thread_level == MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace

// Watches the calls in flight: each is done when its completion event has fired (or, for host
// calls such as ncclCommInitRank, when Finish is called). Past its deadline, or on an asynchronous
// NCCL error, it logs the call, the group and the wait, aborts the NCCL communicator and the job.
class NcclWatchdog {
 public:
  NcclWatchdog(std::string group, std::string this_rank, double timeout_seconds, int device)
      : group_(std::move(group)),
        this_rank_(std::move(this_rank)),
        timeout_seconds_(timeout_seconds),
        device_(device),
        thread_([this] { Run(); }) {}

  ~NcclWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    for (const Watched& call : watched_) {
      if (call.done != nullptr) cudaEventDestroy(call.done);
    }
  }

  void SetComm(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_ = comm;
  }

  // Starts the clock of a call; returns its ticket.
  uint64_t Start(std::string description) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Clock::time_point now = Clock::now();
    watched_.push_back({next_ticket_, std::move(description), now,
                        now + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(timeout_seconds_)),
                        nullptr, false});
    return next_ticket_++;
  }

  // The call is done when `done` (recorded after it; the watchdog destroys it) has fired.
  void Track(uint64_t ticket, cudaEvent_t done) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Watched& call : watched_) {
      if (call.ticket == ticket) call.done = done;
    }
  }

  void Finish(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Watched& call : watched_) {
      if (call.ticket == ticket) call.finished = true;
    }
  }

 private:
  struct Watched {
    uint64_t ticket;
    std::string description;
    Clock::time_point start, deadline;
    cudaEvent_t done;  // nullptr until Track
    bool finished;
  };

  void Run() {
    cudaSetDevice(device_);  // event queries below are on this device
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (comm_ != nullptr) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
          Fail(absl::StrCat(
              "NCCL error in group ", group_, " (", this_rank_, ")",
              watched_.empty() ? std::string() : " during " + watched_.front().description, ": ",
              internal::DescribeNcclResult(async)));
        }
      }
      const Clock::time_point now = Clock::now();
      for (auto call = watched_.begin(); call != watched_.end();) {
        const cudaError_t state =
            call->done == nullptr ? cudaErrorNotReady : cudaEventQuery(call->done);
        if (call->finished || state == cudaSuccess) {
          if (call->done != nullptr) cudaEventDestroy(call->done);
          call = watched_.erase(call);
          continue;
        }
        if (state != cudaErrorNotReady) {
          // Sticky errors of earlier compute kernels surface here too.
          Fail(
              absl::StrCat("CUDA error (possibly from an earlier compute kernel) seen by the "
                           "watchdog of group ",
                           group_, " (", this_rank_, ") while waiting for ", call->description,
                           ": ", internal::DescribeCudaError(state)));
        }
        if (now >= call->deadline) {
          Fail(absl::StrCat(
              "communication timeout: ", call->description, " in group ", group_, " (", this_rank_,
              ") did not complete after ",
              absl::StrFormat("%.1f", std::chrono::duration<double>(now - call->start).count()),
              " s (timeout ", timeout_seconds_,
              " s). NCCL does not tell which ranks did not arrive: the one whose log stops "
              "before this call is dead or hung. Aborting the job "
              "(parallel.collective_timeout_seconds sets the timeout)."));
        }
        ++call;
      }
    }
  }

  [[noreturn]] void Fail(const std::string& message) {
    KLOG(ERROR) << message;
    if (comm_ != nullptr) ncclCommAbort(comm_);
    AbortJob();
  }

  const std::string group_, this_rank_;
  const double timeout_seconds_;
  const int device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::list<Watched> watched_;
  uint64_t next_ticket_ = 1;
  ncclComm_t comm_ = nullptr;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

NcclCommunicator::NcclCommunicator(std::string_view role, int rank, std::vector<int> world_ranks,
                                   const CommunicatorOptions& options, const Context& ctx)
    : Communicator(std::string(role), rank, std::move(world_ranks)), ctx_(ctx) {
  KELVIN_CUDA_CHECK(cudaSetDevice(ctx_.device().index));
  KELVIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KELVIN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
  barrier_scratch_ = Tensor::Empty({1}, DType::kF32, ctx_.device());
  ops::Fill(ctx_, barrier_scratch_, 0.0);  // summed by every Barrier: keep it finite
  watchdog_ = std::make_unique<NcclWatchdog>(
      name(),
      absl::StrCat("group rank ", this->rank(), ", world rank ",
                   this->world_ranks()[static_cast<size_t>(this->rank())]),
      options.timeout_seconds, ctx_.device().index);
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Create(
    MPI_Comm comm, std::string_view role, const CommunicatorOptions& options, const Context& ctx) {
  const std::string who = absl::StrCat("communicator ", std::string(role));
  if (!CudaAvailable()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": the NCCL backend needs a CUDA device (", CudaUnavailableReason(), ")"));
  }
  if (!ctx.is_cuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": the NCCL backend needs a CUDA context (on the local rank's device), not ",
        ctx.device().ToString()));
  }
  // The unique id travels from group rank 0 over MPI, under the same timeout.
  MpiCommunicator bootstrap(comm, role, options, Context::Cpu());
  auto nccl = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(role, bootstrap.rank(), bootstrap.world_ranks(), options, ctx));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) KELVIN_NCCL_CHECK(ncclGetUniqueId(&id));
  static_assert(sizeof(id) % sizeof(int32_t) == 0);
  Tensor id_words = Tensor::Empty({static_cast<int64_t>(sizeof(id) / sizeof(int32_t))},
                                  DType::kI32);  // [32] the id's bytes
  std::memcpy(id_words.raw_data(), &id, sizeof(id));
  bootstrap.Broadcast(id_words, 0);
  std::memcpy(&id, id_words.raw_data(), sizeof(id));

  const uint64_t ticket =
      nccl->watchdog_->Start(absl::StrCat("ncclCommInitRank of ", nccl->name()));
  KELVIN_NCCL_CHECK(ncclCommInitRank(&nccl->comm_, nccl->size(), id, nccl->rank()));
  nccl->watchdog_->Finish(ticket);
  nccl->watchdog_->SetComm(nccl->comm_);
  return std::unique_ptr<Communicator>(std::move(nccl));
}

NcclCommunicator::~NcclCommunicator() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);  // the watchdog still guards this
  watchdog_.reset();
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::Describe(std::string_view call, std::string_view detail,
                                       const Tensor& tensor) {
  return absl::StrCat(std::string(call), detail.empty() ? "" : "(", std::string(detail),
                      detail.empty() ? "" : ")", " #", ++calls_, " of ", tensor.numel(), " ",
                      std::string(DTypeName(tensor.dtype())), " elements");
}

Tensor NcclCommunicator::Stage(const Tensor& tensor, bool read, std::string_view call) const {
  KELVIN_CHECK(tensor.is_cpu() || tensor.device() == ctx_.device())
      << call << " on " << name() << ": " << tensor.ToString() << " is not on "
      << ctx_.device().ToString() << ", the communicator's device (nor on the host)";
  if (!tensor.is_cpu()) return tensor;
  if (read) return CopyToDevice(ctx_, tensor, ctx_.device());
  return Tensor::Empty(tensor.shape(), tensor.dtype(), ctx_.device());
}

void NcclCommunicator::Unstage(const Tensor& staged, Tensor& tensor) const {
  if (!staged.SameStorage(tensor)) CopyTensor(ctx_, staged, tensor);  // waits for the stream
}

cudaEvent_t NcclCommunicator::Launch(const std::string& description,
                                     const std::function<void(cudaStream_t)>& launch,
                                     bool deferred) {
  const cudaStream_t compute = StreamOf(ctx_);
  KELVIN_CUDA_CHECK(cudaEventRecord(compute_ready_, compute));
  KELVIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
  const uint64_t ticket = watchdog_->Start(description);
  launch(stream_);
  cudaEvent_t done = nullptr;  // the watchdog's, destroyed once it completed
  KELVIN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  KELVIN_CUDA_CHECK(cudaEventRecord(done, stream_));
  cudaEvent_t finished = nullptr;  // the caller's
  if (deferred) {
    KELVIN_CUDA_CHECK(cudaEventCreateWithFlags(&finished, cudaEventDisableTiming));
    KELVIN_CUDA_CHECK(cudaEventRecord(finished, stream_));
  } else {
    KELVIN_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
  }
  watchdog_->Track(ticket, done);
  return finished;
}

// A collective enqueued on the communication stream: Wait orders the compute stream after it.
class NcclCommunicator::Pending final : public PendingCollective {
 public:
  Pending(const Context& ctx, cudaEvent_t finished) : ctx_(ctx), finished_(finished) {}
  ~Pending() override { Wait(); }
  void Wait() override {
    if (finished_ == nullptr) return;
    KELVIN_CUDA_CHECK(cudaStreamWaitEvent(StreamOf(ctx_), finished_, 0));
    KELVIN_CUDA_CHECK(cudaEventDestroy(finished_));
    finished_ = nullptr;
  }

 private:
  Context ctx_;
  cudaEvent_t finished_;
};

void NcclCommunicator::AllReduce(Tensor& tensor, ReduceOp op) {
  Tensor data = Stage(tensor, true, "AllReduce");
  Launch(Describe("AllReduce", ReduceOpName(op), data), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclAllReduce(data.raw_data(), data.raw_data(),
                                    static_cast<size_t>(data.numel()), NcclType(data.dtype()),
                                    NcclOp(op, data.dtype()), comm_, stream));
  });
  Unstage(data, tensor);
}

void NcclCommunicator::AllGather(const Tensor& input, Tensor& output) {
  KELVIN_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * size())
      << "AllGather from " << input.ToString() << " to " << output.ToString() << " on " << name();
  const Tensor in = Stage(input, true, "AllGather");
  Tensor out = Stage(output, false, "AllGather");
  Launch(Describe("AllGather", "", in), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                                    NcclType(in.dtype()), comm_, stream));
  });
  Unstage(out, output);
}

void NcclCommunicator::ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) {
  KELVIN_CHECK(output.dtype() == input.dtype() && input.numel() == output.numel() * size())
      << "ReduceScatter from " << input.ToString() << " to " << output.ToString() << " on "
      << name();
  const Tensor in = Stage(input, true, "ReduceScatter");
  Tensor out = Stage(output, false, "ReduceScatter");
  Launch(Describe("ReduceScatter", ReduceOpName(op), in), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(),
                                        static_cast<size_t>(out.numel()), NcclType(in.dtype()),
                                        NcclOp(op, in.dtype()), comm_, stream));
  });
  Unstage(out, output);
}

cudaEvent_t NcclCommunicator::LaunchReduceScatterUneven(const Tensor& in, Tensor& out,
                                                        const std::vector<int64_t>& counts,
                                                        ReduceOp op, bool deferred) {
  return Launch(
      Describe("ReduceScatterUneven", ReduceOpName(op), in),
      [&](cudaStream_t stream) {
        KELVIN_NCCL_CHECK(ncclGroupStart());
        int64_t offset = 0;  // elements before member j's chunk
        for (int j = 0; j < size(); ++j) {
          const int64_t count = counts[static_cast<size_t>(j)];
          if (count > 0) {  // the output is read on member j only
            KELVIN_NCCL_CHECK(ncclReduce(ChunkOf(in, offset, 1), out.raw_data(),
                                         static_cast<size_t>(count), NcclType(in.dtype()),
                                         NcclOp(op, in.dtype()), j, comm_, stream));
          }
          offset += count;
        }
        KELVIN_NCCL_CHECK(ncclGroupEnd());
      },
      deferred);
}

void NcclCommunicator::ReduceScatterUneven(const Tensor& input, Tensor& output,
                                           const std::vector<int64_t>& counts, ReduceOp op) {
  CheckUnevenSplit(*this, input, output, counts, "ReduceScatterUneven");
  const Tensor in = Stage(input, true, "ReduceScatterUneven");
  Tensor out = Stage(output, false, "ReduceScatterUneven");
  LaunchReduceScatterUneven(in, out, counts, op, /*deferred=*/false);
  Unstage(out, output);
}

cudaEvent_t NcclCommunicator::LaunchAllGatherUneven(const Tensor& in, Tensor& out,
                                                    const std::vector<int64_t>& counts,
                                                    bool deferred) {
  return Launch(
      Describe("AllGatherUneven", "", out),
      [&](cudaStream_t stream) {
        KELVIN_NCCL_CHECK(ncclGroupStart());
        int64_t offset = 0;  // elements before member j's chunk
        for (int j = 0; j < size(); ++j) {
          const int64_t count = counts[static_cast<size_t>(j)];
          if (count > 0) {  // the input is read on member j only
            void* chunk = ChunkOf(out, offset, 1);
            KELVIN_NCCL_CHECK(ncclBroadcast(j == rank() ? in.raw_data() : chunk, chunk,
                                            static_cast<size_t>(count), NcclType(out.dtype()), j,
                                            comm_, stream));
          }
          offset += count;
        }
        KELVIN_NCCL_CHECK(ncclGroupEnd());
      },
      deferred);
}

void NcclCommunicator::AllGatherUneven(const Tensor& input, Tensor& output,
                                       const std::vector<int64_t>& counts) {
  CheckUnevenSplit(*this, output, input, counts, "AllGatherUneven");
  const Tensor in = Stage(input, true, "AllGatherUneven");
  Tensor out = Stage(output, false, "AllGatherUneven");
  LaunchAllGatherUneven(in, out, counts, /*deferred=*/false);
  Unstage(out, output);
}

std::unique_ptr<PendingCollective> NcclCommunicator::StartAllReduce(Tensor& tensor, ReduceOp op) {
  if (tensor.is_cpu()) return Communicator::StartAllReduce(tensor, op);
  Stage(tensor, true, "AllReduce");  // checks the device
  const cudaEvent_t finished = Launch(
      Describe("AllReduce", ReduceOpName(op), tensor),
      [&](cudaStream_t stream) {
        KELVIN_NCCL_CHECK(
            ncclAllReduce(tensor.raw_data(), tensor.raw_data(), static_cast<size_t>(tensor.numel()),
                          NcclType(tensor.dtype()), NcclOp(op, tensor.dtype()), comm_, stream));
      },
      /*deferred=*/true);
  return std::make_unique<Pending>(ctx_, finished);
}

std::unique_ptr<PendingCollective> NcclCommunicator::StartReduceScatterUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts, ReduceOp op) {
  if (input.is_cpu() || output.is_cpu()) {
    return Communicator::StartReduceScatterUneven(input, output, counts, op);
  }
  CheckUnevenSplit(*this, input, output, counts, "ReduceScatterUneven");
  Stage(input, true, "ReduceScatterUneven");  // checks the device
  return std::make_unique<Pending>(
      ctx_, LaunchReduceScatterUneven(input, output, counts, op, /*deferred=*/true));
}

std::unique_ptr<PendingCollective> NcclCommunicator::StartAllGatherUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) {
  if (input.is_cpu() || output.is_cpu()) {
    return Communicator::StartAllGatherUneven(input, output, counts);
  }
  CheckUnevenSplit(*this, output, input, counts, "AllGatherUneven");
  Stage(input, true, "AllGatherUneven");  // checks the device
  return std::make_unique<Pending>(ctx_,
                                   LaunchAllGatherUneven(input, output, counts, /*deferred=*/true));
}

void NcclCommunicator::Broadcast(Tensor& tensor, int root) {
  KELVIN_CHECK(root >= 0 && root < size()) << "Broadcast root " << root << " on " << name();
  Tensor data = Stage(tensor, rank() == root, "Broadcast");
  Launch(Describe("Broadcast", absl::StrCat("root ", root), data), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclBroadcast(data.raw_data(), data.raw_data(),
                                    static_cast<size_t>(data.numel()), NcclType(data.dtype()), root,
                                    comm_, stream));
  });
  Unstage(data, tensor);
}

void NcclCommunicator::Send(const Tensor& tensor, int peer) {
  KELVIN_CHECK(peer >= 0 && peer < size() && peer != rank())
      << "Send to " << peer << " on " << name();
  const Tensor data = Stage(tensor, true, "Send");
  Launch(Describe("Send", absl::StrCat("to group rank ", peer), data), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclSend(data.raw_data(), static_cast<size_t>(data.numel()),
                               NcclType(data.dtype()), peer, comm_, stream));
  });
  // A staged copy must outlive the send: wait for it (device tensors return at once).
  if (!data.SameStorage(tensor)) KELVIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void NcclCommunicator::Recv(Tensor& tensor, int peer) {
  KELVIN_CHECK(peer >= 0 && peer < size() && peer != rank())
      << "Recv from " << peer << " on " << name();
  Tensor data = Stage(tensor, false, "Recv");
  Launch(Describe("Recv", absl::StrCat("from group rank ", peer), data), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclRecv(data.raw_data(), static_cast<size_t>(data.numel()),
                               NcclType(data.dtype()), peer, comm_, stream));
  });
  Unstage(data, tensor);
}

void NcclCommunicator::AllToAll(const Tensor& input, Tensor& output) {
  KELVIN_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() &&
               input.numel() % size() == 0)
      << "AllToAll from " << input.ToString() << " to " << output.ToString() << " on " << name();
  const Tensor in = Stage(input, true, "AllToAll");
  Tensor out = Stage(output, false, "AllToAll");
  const int64_t chunk = in.numel() / size();
  Launch(Describe("AllToAll", "", in), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size(); ++peer) {
      KELVIN_NCCL_CHECK(ncclSend(ChunkOf(in, peer, chunk), static_cast<size_t>(chunk),
                                 NcclType(in.dtype()), peer, comm_, stream));
      KELVIN_NCCL_CHECK(ncclRecv(ChunkOf(out, peer, chunk), static_cast<size_t>(chunk),
                                 NcclType(in.dtype()), peer, comm_, stream));
    }
    KELVIN_NCCL_CHECK(ncclGroupEnd());
  });
  Unstage(out, output);
}

void NcclCommunicator::Barrier() {
  Launch(Describe("Barrier", "", barrier_scratch_), [&](cudaStream_t stream) {
    KELVIN_NCCL_CHECK(ncclAllReduce(barrier_scratch_.raw_data(), barrier_scratch_.raw_data(), 1,
                                    ncclFloat32, ncclSum, comm_, stream));
  });
  KELVIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the watchdog ends a wait that hangs
}

}  // namespace kelvin::parallel
