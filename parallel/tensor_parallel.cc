// The region ops as the group's collectives on flat views (a one-rank group's are identities: the
// process grid makes it a SelfCommunicator; the column gather returns its input unmoved).
#include "parallel/tensor_parallel.h"

#include <cstring>

#include "core/check.h"
#include "core/copy.h"

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

Tensor GatherFromTensorParallelRegion(const Context& ctx, Communicator& tp, const Tensor& local) {
  if (tp.size() == 1) return local;  // the whole columns already, where they are
  const int64_t rows = local.dim(0), width = local.dim(1), ranks = tp.size();
  // Every rank's slice [TP][R][W / TP] on the host, then each row's slices side by side.
  const Tensor mine = local.is_cpu() ? local : CopyToDevice(ctx, local, Device::Cpu());
  Tensor slices = Tensor::Empty({ranks * rows * width}, local.dtype());
  tp.AllGather(mine.View({-1}), slices);
  Tensor full = Tensor::Empty({rows, ranks * width}, local.dtype());  // [R, W]
  const size_t element = DTypeSize(local.dtype());
  const auto* from = static_cast<const char*>(slices.raw_data());
  auto* to = static_cast<char*>(full.raw_data());
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(to + (row * ranks + r) * width * element,
                  from + (r * rows + row) * width * element, width * element);
    }
  }
  return ctx.is_cuda() ? CopyToDevice(ctx, full, ctx.device()) : full;
}

}  // namespace kelvin::parallel
