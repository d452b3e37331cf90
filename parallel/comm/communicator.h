// Communicator: the collectives and point-to-point transfers of one process group over Kelvin
// tensors, whatever the backend (MPI in parallel/comm/mpi_communicator.h, NCCL in
// parallel/comm/nccl_communicator.h). No call hangs: one that does not complete within the timeout
// aborts the job with a message naming the operation, the group and the ranks that did not arrive.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::parallel {

enum class ReduceOp { kSum, kAvg, kMax };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", "max"

enum class CommBackend { kMpi, kNccl };

struct CommunicatorOptions {
  // A call that has not completed after this long aborts the job (parallel.
  // collective_timeout_seconds in the job config; the same default).
  double timeout_seconds = 600;
};

// A collective a Start call began: its output is in place once Wait returns. Every rank of the
// group must start the same collectives in the same order, blocking calls included, and wait for
// each; destroying one that was not waited for waits for it.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Blocks until the collective has completed, under the communicator's timeout counted from its
  // start (which aborts the job as a blocking call's does).
  virtual void Wait() = 0;
  // Lets it advance without blocking: MPI moves a non-blocking collective on only inside its calls,
  // so a rank computing meanwhile calls this now and then. A no-op where the transfer runs by
  // itself (NCCL on its stream) or already completed.
  virtual void Progress() {}
};

// Element types: f32, f64, bf16, i32, i64. Data movement is bit-exact in every type. Reductions:
// f32, f64, i32, i64 reduce in their own type; bf16 is widened to f32, reduced in f32 and rounded
// to bf16 once at the end (the MPI backend; NCCL reduces bf16 natively). kAvg is for floating
// types only: the sum divided by size(). Results are written in place or to `output`, which must
// have the stated element count and the input's dtype and device; shapes are free. All tensors of
// one call live on one device (CPU or CUDA); every rank of the group must make the same
// collective calls in the same order with the same counts.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }  // in [0, size())
  int size() const { return static_cast<int>(world_ranks_.size()); }
  // "tp[0,1]": the group's role and its members' world ranks (elided past 8 members).
  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }  // by group rank

  // tensor = op over the group of every rank's tensor.
  virtual void AllReduce(Tensor& tensor, ReduceOp op) = 0;
  // output [size() * n] = every rank's input [n], in group-rank order.
  virtual void AllGather(const Tensor& input, Tensor& output) = 0;
  // output [n] = chunk rank() of op over the group of every rank's input [size() * n].
  virtual void ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // tensor = root's tensor (root: a group rank).
  virtual void Broadcast(Tensor& tensor, int root) = 0;
  // Point-to-point with group rank `peer`; the peer calls the matching Recv/Send with the same
  // element count and dtype. Successive transfers between two ranks arrive in order.
  virtual void Send(const Tensor& tensor, int peer) = 0;
  virtual void Recv(Tensor& tensor, int peer) = 0;
  // output chunk j [n] = rank j's input chunk rank() [n]; input and output [size() * n].
  virtual void AllToAll(const Tensor& input, Tensor& output) = 0;
  virtual void Barrier() = 0;
  // output [counts[rank()]] = this rank's chunk of op over the group of every rank's input
  // [sum of counts], whose chunk j is the counts[j] elements after chunks 0..j-1 (counts may be 0).
  virtual void ReduceScatterUneven(const Tensor& input, Tensor& output,
                                   const std::vector<int64_t>& counts, ReduceOp op) = 0;
  // output [sum of counts] = every rank's input [counts[rank]], rank j's after the counts[0..j)
  // elements of the ranks before it (counts may be 0): ReduceScatterUneven's inverse.
  virtual void AllGatherUneven(const Tensor& input, Tensor& output,
                               const std::vector<int64_t>& counts) = 0;

  // Non-blocking forms of AllReduce, ReduceScatterUneven and AllGatherUneven: the tensors must
  // stay alive and untouched until Wait. This base runs the blocking call at once and returns a
  // completed handle; the backends that can overlap (MPI, NCCL) override them.
  virtual std::unique_ptr<PendingCollective> StartAllReduce(Tensor& tensor, ReduceOp op);
  virtual std::unique_ptr<PendingCollective> StartReduceScatterUneven(
      const Tensor& input, Tensor& output, const std::vector<int64_t>& counts, ReduceOp op);
  virtual std::unique_ptr<PendingCollective> StartAllGatherUneven(
      const Tensor& input, Tensor& output, const std::vector<int64_t>& counts);

  // `value` reduced over the group (in f64, through AllReduce of a host tensor).
  double AllReduceScalar(double value, ReduceOp op);

 protected:
  Communicator(std::string role, int rank, std::vector<int> world_ranks);

 private:
  int rank_;
  std::vector<int> world_ranks_;
  std::string name_;
};

// Aborts unless `counts` has one entry >= 0 per member summing to `whole`'s elements and `chunk`
// holds counts[rank()] elements of whole's dtype on its device: the contract of `call`
// (ReduceScatterUneven from the whole to the chunk, AllGatherUneven the other way).
void CheckUnevenSplit(const Communicator& group, const Tensor& whole, const Tensor& chunk,
                      const std::vector<int64_t>& counts, std::string_view call);

// "tp[0,1]", "dp[0,2,4,6,8,10,12,14,...(64 ranks)]".
std::string GroupName(std::string_view role, const std::vector<int>& world_ranks);

// One outcome for a step every rank of `group` takes: `status` where it is
// an error, and on the ranks where it is OK an error naming the ranks (of the group) where `what`
// failed, so that no rank goes on to wait for the failed ones; OK when it is OK everywhere.
// Collective over `group`.
absl::Status AgreeOnStatus(Communicator& group, const absl::Status& status, std::string_view what);

// One outcome, the same on every rank of `group`, for a step whose failure every rank must act on
// alike (e.g. set a damaged checkpoint aside and try the one before): OK when `status` is OK
// everywhere, else the error of the lowest group rank where it failed, its code and message (cut
// at kSharedMessageBytes), on every rank. Another failing rank logs its own error first.
// Collective over `group`.
inline constexpr int64_t kSharedMessageBytes = 4096;
absl::Status ShareFirstFailure(Communicator& group, const absl::Status& status);

}  // namespace kelvin::parallel
