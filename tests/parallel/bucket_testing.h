// A one-rank Communicator for the bucket tests: records the element count of every all-reduce and
// uneven all-gather when it starts (sums nothing, copies the gather's one chunk); any other call
// is a bug of the test.
#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/copy.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel::testing {

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator() : Communicator("dp", 0, {0}) {}
  void AllReduce(Tensor& tensor, ReduceOp /*op*/) override { started.push_back(tensor.numel()); }
  void AllGatherUneven(const Tensor& input, Tensor& output,
                       const std::vector<int64_t>& counts) override {
    CheckUnevenSplit(*this, output, input, counts, "AllGatherUneven");
    gathered.push_back(output.numel());
    CopyTensor(Context::Cpu(), input, output);
  }
  void AllGather(const Tensor&, Tensor&) override { Unused(); }
  void ReduceScatter(const Tensor&, Tensor&, ReduceOp) override { Unused(); }
  void Broadcast(Tensor&, int) override { Unused(); }
  void Send(const Tensor&, int) override { Unused(); }
  void Recv(Tensor&, int) override { Unused(); }
  void AllToAll(const Tensor&, Tensor&) override { Unused(); }
  void Barrier() override { Unused(); }
  void ReduceScatterUneven(const Tensor&, Tensor&, const std::vector<int64_t>&, ReduceOp) override {
    Unused();
  }

  std::vector<int64_t> started;   // all-reduces, by elements
  std::vector<int64_t> gathered;  // uneven all-gathers, by the output's elements

 private:
  static void Unused() { KELVIN_FATAL() << "not a call of the buckets under test"; }
};

}  // namespace kelvin::parallel::testing
