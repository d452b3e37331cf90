// MpiCommunicator: the Communicator over MPI. CPU tensors go to MPI directly; CUDA tensors are
// staged through host memory (copied to the host on the context's stream, communicated, copied
// back), so several processes may share one GPU in tests. Every call is issued non-blocking and
// polled against the deadline; see Communicator for the timeout's message.
#pragma once

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/comm/liveness_probe.h"

namespace kelvin::parallel {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` three times (data, arrival notices, liveness probes) with
  // MPI_ERRORS_RETURN: collective over `comm`, under the timeout.
  MpiCommunicator(MPI_Comm comm, std::string_view role, const CommunicatorOptions& options,
                  const Context& ctx);
  ~MpiCommunicator() override;

  void AllReduce(Tensor& tensor, ReduceOp op) override;
  void AllGather(const Tensor& input, Tensor& output) override;
  void ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  void Broadcast(Tensor& tensor, int root) override;
  void Send(const Tensor& tensor, int peer) override;
  void Recv(Tensor& tensor, int peer) override;
  void AllToAll(const Tensor& input, Tensor& output) override;
  void Barrier() override;
  void ReduceScatterUneven(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts,
                           ReduceOp op) override;
  void AllGatherUneven(const Tensor& input, Tensor& output,
                       const std::vector<int64_t>& counts) override;
  std::unique_ptr<PendingCollective> StartAllReduce(Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<PendingCollective> StartReduceScatterUneven(const Tensor& input, Tensor& output,
                                                              const std::vector<int64_t>& counts,
                                                              ReduceOp op) override;
  std::unique_ptr<PendingCollective> StartAllGatherUneven(
      const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) override;

  // Collective calls made so far (the number of the last one in timeout messages).
  int64_t collectives_started() const { return sequence_; }

 private:
  enum class CallKind : int64_t;
  struct Call;
  struct InFlight;
  class Pending;
  // Posts the arrival notices of collective call `call` and runs `post` (which starts its
  // non-blocking MPI operations into the vector).
  std::unique_ptr<InFlight> StartCollective(
      Call call, const std::function<void(std::vector<MPI_Request>&)>& post);
  // Waits for all of a started call's operations under the deadline from its start, checks that
  // every rank made the same call and runs its `finish`; on timeout aborts the job.
  void CompleteCollective(InFlight& flight);
  // StartCollective, then CompleteCollective.
  void RunCollective(Call call, const std::function<void(std::vector<MPI_Request>&)>& post);
  // The AllReduce, ReduceScatterUneven and AllGatherUneven calls started, their results copied
  // out by `finish`.
  std::unique_ptr<InFlight> StartAllReduceCall(Tensor& tensor, ReduceOp op);
  std::unique_ptr<InFlight> StartReduceScatterUnevenCall(const Tensor& input, Tensor& output,
                                                         const std::vector<int64_t>& counts,
                                                         ReduceOp op);
  std::unique_ptr<InFlight> StartAllGatherUnevenCall(const Tensor& input, Tensor& output,
                                                     const std::vector<int64_t>& counts);
  // Starts `post`'s single point-to-point request with group rank `peer` and waits for it.
  void RunPointToPoint(const Call& call, int peer, const std::function<void(MPI_Request&)>& post);
  [[noreturn]] void AbortOnTimeout(const Call& call, std::chrono::steady_clock::duration waited,
                                   const std::string& who_is_missing);
  // Who is missing from `call` after a timeout: the members that did not arrive, are in another
  // call, and the processes of the job that do not answer a liveness question (named first: a
  // member that did not arrive but answers waits elsewhere, for them).
  std::string DescribeArrivals(InFlight& flight);
  // How long before the timeout a waiting rank asks the others whether they are there: timeout /
  // 4, at most 5 s.
  std::chrono::steady_clock::duration ProbeGrace() const;
  // Whether a pause between two polls of a wait (`pause`) was longer than ProbeGrace(): then
  // this process itself was stopped, and the others' silence is no evidence; PausedText says so.
  bool PausedTooLong(std::chrono::steady_clock::duration pause) const;
  std::string PausedText(std::chrono::steady_clock::duration pause) const;
  // How long a timed-out rank serves the others' questions before it aborts: ProbeGrace(), at most
  // 1 s.
  std::chrono::steady_clock::duration AbortLinger() const;
  // Why a wait ended after a stop signal's grace (parallel/comm/stop_deadline.h).
  std::string StoppedText() const;

  MPI_Comm DuplicateWithErrorsReturned(MPI_Comm comm);
  Tensor ToHost(const Tensor& tensor) const;  // the tensor itself when it lives on the host
  void FromHost(const Tensor& host, Tensor& tensor) const;  // no-op when they are one

  MPI_Comm data_comm_ = MPI_COMM_NULL;     // the collectives and transfers themselves
  MPI_Comm arrival_comm_ = MPI_COMM_NULL;  // "rank r reached collective #n" notices
  MPI_Comm probe_comm_ = MPI_COMM_NULL;    // liveness probes
  std::unique_ptr<LivenessProbe> probe_;
  CommunicatorOptions options_;
  Context ctx_;
  int64_t sequence_ = 0;  // collective calls started on this rank
};

}  // namespace kelvin::parallel
