// TimedCommunicator: a Communicator that forwards every call to another one and adds up the wall
// time the calls take, so a step can report its communication share (and a pipeline stage the
// time it waits for its neighbours: the bubble). The time is the caller's: the whole transfer for
// the MPI backend, the enqueueing only for NCCL's asynchronous calls; for a non-blocking call its
// start and its Wait, so what computing hid is not counted.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

class TimedCommunicator final : public Communicator {
 public:
  // `role` as `inner` was created with ("tp", "pp", ...).
  TimedCommunicator(std::string role, std::unique_ptr<Communicator> inner);

  double seconds() const { return seconds_; }  // spent in this group's calls so far

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

 private:
  class TimedPending;
  // Runs `call` on the inner communicator, adding its duration; returns what it returns.
  template <typename Call>
  auto Timed(Call&& call) {
    const auto start = std::chrono::steady_clock::now();
    struct AddDuration {
      TimedCommunicator* self;
      std::chrono::steady_clock::time_point start;
      ~AddDuration() {
        self->seconds_ +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    } add{this, start};
    return call(*inner_);
  }

  std::unique_ptr<Communicator> inner_;
  double seconds_ = 0;
};

}  // namespace kelvin::parallel
