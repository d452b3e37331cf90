// The region ops as the group's collectives on flat views (a one-rank group's are identities: the
// process grid makes it a SelfCommunicator).
#include "parallel/tensor_parallel.h"

#include "core/check.h"

namespace kelvin::parallel {

void ReduceFromTensorParallelRegion(Communicator& tp, Tensor& partial) {
  tp.AllReduce(partial, ReduceOp::kSum);
}

void ReduceScatterToSequenceParallelRegion(Communicator& tp, const Tensor& partial, Tensor& local) {
  KELVIN_CHECK(partial.numel() == local.numel() * tp.size())
      << "reduce-scatter to the sequence-parallel region: " << partial.ToString() << " over "
      << tp.size() << " ranks into " << local.ToString();
  Tensor flat = local.View({-1});
  tp.ReduceScatter(partial.View({-1}), flat, ReduceOp::kSum);
}

void GatherFromSequenceParallelRegion(Communicator& tp, const Tensor& local, Tensor& full) {
  KELVIN_CHECK(full.numel() == local.numel() * tp.size())
      << "gather from the sequence-parallel region: " << local.ToString() << " over " << tp.size()
      << " ranks into " << full.ToString();
  Tensor flat = full.View({-1});
  tp.AllGather(local.View({-1}), flat);
}

}  // namespace kelvin::parallel
