// Every call forwarded and timed.
#include "parallel/comm/timed_communicator.h"

#include <utility>

namespace kelvin::parallel {

TimedCommunicator::TimedCommunicator(std::string role, std::unique_ptr<Communicator> inner)
    : Communicator(std::move(role), inner->rank(), inner->world_ranks()),
      inner_(std::move(inner)) {}

void TimedCommunicator::AllReduce(Tensor& tensor, ReduceOp op) {
  Timed([&](Communicator& c) { c.AllReduce(tensor, op); });
}
void TimedCommunicator::AllGather(const Tensor& input, Tensor& output) {
  Timed([&](Communicator& c) { c.AllGather(input, output); });
}
void TimedCommunicator::ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) {
  Timed([&](Communicator& c) { c.ReduceScatter(input, output, op); });
}
void TimedCommunicator::Broadcast(Tensor& tensor, int root) {
  Timed([&](Communicator& c) { c.Broadcast(tensor, root); });
}
void TimedCommunicator::Send(const Tensor& tensor, int peer) {
  Timed([&](Communicator& c) { c.Send(tensor, peer); });
}
void TimedCommunicator::Recv(Tensor& tensor, int peer) {
  Timed([&](Communicator& c) { c.Recv(tensor, peer); });
}
void TimedCommunicator::AllToAll(const Tensor& input, Tensor& output) {
  Timed([&](Communicator& c) { c.AllToAll(input, output); });
}
void TimedCommunicator::Barrier() {
  Timed([](Communicator& c) { c.Barrier(); });
}
void TimedCommunicator::ReduceScatterUneven(const Tensor& input, Tensor& output,
                                            const std::vector<int64_t>& counts, ReduceOp op) {
  Timed([&](Communicator& c) { c.ReduceScatterUneven(input, output, counts, op); });
}
void TimedCommunicator::AllGatherUneven(const Tensor& input, Tensor& output,
                                        const std::vector<int64_t>& counts) {
  Timed([&](Communicator& c) { c.AllGatherUneven(input, output, counts); });
}

// The inner handle, its Wait and Progress timed into the communicator's total.
class TimedCommunicator::TimedPending final : public PendingCollective {
 public:
  TimedPending(TimedCommunicator& owner, std::unique_ptr<PendingCollective> inner)
      : owner_(owner), inner_(std::move(inner)) {}
  void Wait() override {
    owner_.Timed([&](Communicator&) { inner_->Wait(); });
  }
  void Progress() override {
    owner_.Timed([&](Communicator&) { inner_->Progress(); });
  }

 private:
  TimedCommunicator& owner_;
  std::unique_ptr<PendingCollective> inner_;
};

std::unique_ptr<PendingCollective> TimedCommunicator::StartAllReduce(Tensor& tensor, ReduceOp op) {
  return std::make_unique<TimedPending>(
      *this, Timed([&](Communicator& c) { return c.StartAllReduce(tensor, op); }));
}
std::unique_ptr<PendingCollective> TimedCommunicator::StartReduceScatterUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts, ReduceOp op) {
  return std::make_unique<TimedPending>(*this, Timed([&](Communicator& c) {
    return c.StartReduceScatterUneven(input, output, counts, op);
  }));
}
std::unique_ptr<PendingCollective> TimedCommunicator::StartAllGatherUneven(
    const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) {
  return std::make_unique<TimedPending>(
      *this, Timed([&](Communicator& c) { return c.StartAllGatherUneven(input, output, counts); }));
}

}  // namespace kelvin::parallel
