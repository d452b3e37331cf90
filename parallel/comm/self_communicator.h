// SelfCommunicator: the group of one process, so that one process is a size-1 grid like any other
// (no code branches on a missing group). Reductions and broadcasts leave the tensor as it is;
// gathers, scatters and all-to-all copy input to output; point-to-point has no peer and aborts.
#pragma once

#include <string>

#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

class SelfCommunicator final : public Communicator {
 public:
  // `role` names it in messages ("tp", "world"); `world_rank` is this process's.
  SelfCommunicator(std::string role, int world_rank, const Context& ctx);

  void AllReduce(Tensor& tensor, ReduceOp op) override;
  void AllGather(const Tensor& input, Tensor& output) override;
  void ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  void ReduceScatterUneven(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts,
                           ReduceOp op) override;
  void AllGatherUneven(const Tensor& input, Tensor& output,
                       const std::vector<int64_t>& counts) override;
  void Broadcast(Tensor& tensor, int root) override;
  void Send(const Tensor& tensor, int peer) override;
  void Recv(Tensor& tensor, int peer) override;
  void AllToAll(const Tensor& input, Tensor& output) override;
  void Barrier() override {}

 private:
  // output = input, after checking the element counts of `call`.
  void CopyWhole(const Tensor& input, Tensor& output, const char* call) const;

  Context ctx_;  // orders the copies of device tensors
};

}  // namespace kelvin::parallel
