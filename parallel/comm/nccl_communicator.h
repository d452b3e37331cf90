// NcclCommunicator: the Communicator over NCCL for CUDA tensors (CUDA builds only). Collectives
// run on the communicator's own stream, ordered after the context's compute stream by an event,
// and the compute stream waits for them in turn; a watchdog thread aborts the job when one does not
// complete within the timeout or NCCL reports an asynchronous error. bf16 reduces natively.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

class NcclWatchdog;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm`: selects ctx's device (cudaSetDevice; the launcher makes ctx on the
  // local rank's device, see CudaDeviceForLocalRank), broadcasts group rank 0's NCCL unique id
  // over MPI and calls ncclCommInitRank under the watchdog. FailedPrecondition without a CUDA
  // device or with a CPU context.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(MPI_Comm comm, std::string_view role,
                                                              const CommunicatorOptions& options,
                                                              const Context& ctx);
  ~NcclCommunicator() override;

  void AllReduce(Tensor& tensor, ReduceOp op) override;
  void AllGather(const Tensor& input, Tensor& output) override;
  void ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  void Broadcast(Tensor& tensor, int root) override;
  void Send(const Tensor& tensor, int peer) override;
  void Recv(Tensor& tensor, int peer) override;
  void AllToAll(const Tensor& input, Tensor& output) override;
  void Barrier() override;  // returns once every member reached it (the host waits)
  // One ncclReduce per member with a non-zero count, to that member, in one NCCL group.
  void ReduceScatterUneven(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts,
                           ReduceOp op) override;
  // One ncclBroadcast from each member with a non-zero count, in one NCCL group.
  void AllGatherUneven(const Tensor& input, Tensor& output,
                       const std::vector<int64_t>& counts) override;
  // On device tensors the collective runs on the communication stream while the compute stream
  // goes on; Wait orders the compute stream after it (the host does not wait). Host tensors are
  // reduced at once, as the blocking calls do.
  std::unique_ptr<PendingCollective> StartAllReduce(Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<PendingCollective> StartReduceScatterUneven(const Tensor& input, Tensor& output,
                                                              const std::vector<int64_t>& counts,
                                                              ReduceOp op) override;
  std::unique_ptr<PendingCollective> StartAllGatherUneven(
      const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) override;

 private:
  NcclCommunicator(std::string_view role, int rank, std::vector<int> world_ranks,
                   const CommunicatorOptions& options, const Context& ctx);
  class Pending;
  // Orders the communication stream after the compute stream, enqueues `launch` on it under the
  // watchdog as `description`, then orders the compute stream after it; with `deferred` it does
  // not, and returns an event recorded after the launch (the caller's to wait on and destroy).
  cudaEvent_t Launch(const std::string& description,
                     const std::function<void(cudaStream_t)>& launch, bool deferred = false);
  // ReduceScatterUneven's launch (the tensors on the device).
  cudaEvent_t LaunchReduceScatterUneven(const Tensor& in, Tensor& out,
                                        const std::vector<int64_t>& counts, ReduceOp op,
                                        bool deferred);
  // AllGatherUneven's launch (the tensors on the device).
  cudaEvent_t LaunchAllGatherUneven(const Tensor& in, Tensor& out,
                                    const std::vector<int64_t>& counts, bool deferred);
  // "AllReduce(sum) #3 of 1001 bf16 elements"; counts the call.
  std::string Describe(std::string_view call, std::string_view detail, const Tensor& tensor);
  // The tensor itself when on the communicator's device; for a host tensor a device copy (holding
  // its values when `read`). Any other device is an error naming `call`. Host tensors (the
  // trainer's scalars, the vocab-parallel loss's per-token statistics) are staged so that every
  // caller of a Communicator works over either backend; calls on host tensors return with their
  // results on the host.
  Tensor Stage(const Tensor& tensor, bool read, std::string_view call) const;
  // Copies a staged host tensor's result back (nothing for a device tensor).
  void Unstage(const Tensor& staged, Tensor& tensor) const;

  Context ctx_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;        // the communication stream
  cudaEvent_t compute_ready_ = nullptr;  // recorded on the compute stream before each call
  Tensor barrier_scratch_;               // [1] f32 on the device, reduced by Barrier
  std::unique_ptr<NcclWatchdog> watchdog_;
  int64_t calls_ = 0;
};

}  // namespace kelvin::parallel
