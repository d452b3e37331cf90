// The one-process group: collectives as identities and copies.
#include "parallel/comm/self_communicator.h"

#include <utility>

#include "core/check.h"
#include "core/copy.h"

namespace kelvin::parallel {

SelfCommunicator::SelfCommunicator(std::string role, int world_rank, const Context& ctx)
    : Communicator(std::move(role), 0, {world_rank}), ctx_(ctx) {}

void SelfCommunicator::AllReduce(Tensor& tensor, ReduceOp op) {
  KELVIN_CHECK(op != ReduceOp::kAvg || IsFloating(tensor.dtype()))
      << name() << ": AllReduce avg needs a floating dtype, not " << DTypeName(tensor.dtype());
}

void SelfCommunicator::AllGather(const Tensor& input, Tensor& output) {
  CopyWhole(input, output, "AllGather");
}

void SelfCommunicator::ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) {
  KELVIN_CHECK(op != ReduceOp::kAvg || IsFloating(input.dtype()))
      << name() << ": ReduceScatter avg needs a floating dtype, not " << DTypeName(input.dtype());
  CopyWhole(input, output, "ReduceScatter");
}

void SelfCommunicator::ReduceScatterUneven(const Tensor& input, Tensor& output,
                                           const std::vector<int64_t>& counts, ReduceOp op) {
  CheckUnevenSplit(*this, input, output, counts, "ReduceScatterUneven");
  ReduceScatter(input, output, op);
}

void SelfCommunicator::AllGatherUneven(const Tensor& input, Tensor& output,
                                       const std::vector<int64_t>& counts) {
  CheckUnevenSplit(*this, output, input, counts, "AllGatherUneven");
  CopyWhole(input, output, "AllGatherUneven");
}

void SelfCommunicator::Broadcast(Tensor& /*tensor*/, int root) {
  KELVIN_CHECK(root == 0) << name() << ": Broadcast from group rank " << root
                          << ", but the group has one member (rank 0)";
}

void SelfCommunicator::Send(const Tensor& /*tensor*/, int peer) {
  KELVIN_FATAL() << name() << ": Send to group rank " << peer
                 << ", but the group has one member: nothing can receive it";
}

void SelfCommunicator::Recv(Tensor& /*tensor*/, int peer) {
  KELVIN_FATAL() << name() << ": Recv from group rank " << peer
                 << ", but the group has one member: nothing can send it";
}

void SelfCommunicator::AllToAll(const Tensor& input, Tensor& output) {
  CopyWhole(input, output, "AllToAll");
}

void SelfCommunicator::CopyWhole(const Tensor& input, Tensor& output, const char* call) const {
  KELVIN_CHECK(input.numel() == output.numel() && input.dtype() == output.dtype())
      << name() << ": " << call << " of " << input.numel() << " " << DTypeName(input.dtype())
      << " elements into " << output.numel() << " " << DTypeName(output.dtype());
  if (input.raw_data() != output.raw_data()) CopyTensor(ctx_, input, output);
}

}  // namespace kelvin::parallel
