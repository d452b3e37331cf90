// What the bucket tests (GradientBuckets, ParameterGather) share: a model of two "layers" and its
// gradient units, and a one-rank communicator that records when each collective starts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/copy.h"
#include "core/optim/parameter_set.h"
#include "parallel/comm/communicator.h"
#include "tests/testing/tensors.h"

namespace kelvin::parallel::testing {

// Two "layers" of a decay matrix and a norm each, and a temperature vector, with the same random
// values in every set this makes. Flat buffers: decay [w1 0..20, w2 20..35], no-decay
// [n1 0..5, n2 5..10], temperature [t 0..3].
inline std::unique_ptr<ParameterSet> TwoLayers() {
  auto params = std::make_unique<ParameterSet>();
  params->Declare("w1", {4, 5}, ParamGroup::kDecay);
  params->Declare("n1", {5}, ParamGroup::kNoDecay);
  params->Declare("w2", {3, 5}, ParamGroup::kDecay);
  params->Declare("n2", {5}, ParamGroup::kNoDecay);
  params->Declare("t", {3}, ParamGroup::kTemperature);
  params->Allocate(DType::kF32);
  uint64_t seed = 1;
  for (const ParameterSet::Entry& e : params->entries()) {
    params->Assign(e.name, kelvin::testing::Random(e.shape, DType::kF32, seed++));
  }
  return params;
}

// TwoLayers' units in the backward's order: layer 2, layer 1, then the temperatures (which the
// forward reads first).
inline const std::vector<std::vector<std::string>> kTwoLayerUnits = {
    {"w2", "n2"}, {"w1", "n1"}, {"t"}};

// A one-rank Communicator: records the element count of every all-reduce and uneven all-gather
// when it starts (sums nothing, copies the gather's one chunk); any other call is a bug of the
// test.
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
