// ZeRO-1 on the parameters' device: AdamW on this rank's shard of the master weights (whose
// gradients GradientBuckets reduce-scattered), all-gather of the master shards through the gradient
// buffers into every rank's model.
#include "parallel/distributed_adamw.h"

#include <algorithm>

#include "core/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/grad_norm.h"

namespace kelvin::parallel {

DistributedAdamW::DistributedAdamW(ParameterSet& params, const AdamWSettings& settings,
                                   Communicator& dp)
    : params_(params), settings_(settings), dp_(dp) {
  KELVIN_CHECK(params.allocated()) << "DistributedAdamW needs allocated parameters";
  KELVIN_CHECK(params.masters_whole())
      << "DistributedAdamW takes its shard of whole master weights (placed by Allocate)";
  KELVIN_CHECK(!params.has_model_copy() || params.masters_sharded())
      << "DistributedAdamW with a model copy needs sharded masters: ParameterSet::Allocate with "
         "gradient_shards "
      << dp.size();
  const Context& ctx = params.context();
  const int64_t ranks = dp.size();
  for (int g = 0; g < kNumParamGroups; ++g) {
    const auto group = static_cast<ParamGroup>(g);
    const Tensor& grads = params.grads(group);  // the masters' dtype (AccumDType)
    if (!grads.defined()) continue;
    GroupShard& s = groups_[g];
    s.elements = grads.numel();
    s.shard = (s.elements + ranks - 1) / ranks;
    s.begin = dp.rank() * s.shard;
    s.count = std::clamp<int64_t>(s.elements - s.begin, 0, s.shard);
    KELVIN_CHECK(params.padded_grads(group).numel() == ranks * s.shard)
        << "DistributedAdamW over " << ranks
        << " ranks needs ParameterSet::Allocate with gradient_shards " << ranks;
    s.grad = Zeros(ctx, {s.shard}, grads.dtype());
    s.m = Zeros(ctx, {s.shard}, grads.dtype());
    s.v = Zeros(ctx, {s.shard}, grads.dtype());
    if (params.masters_sharded()) {
      s.master = Zeros(ctx, {s.shard}, grads.dtype());  // zero past `count`
      if (s.count > 0) {
        Tensor head = s.master.Slice(0, s.count);
        CopyTensor(ctx, params.masters(group).Slice(s.begin, s.begin + s.count), head);
      }
    } else if (s.count > 0) {
      s.master = params.masters(group).Slice(s.begin, s.begin + s.count);
    }
  }
  if (params.masters_sharded()) params.DropWholeMasters();  // the gradients start from zero
}

std::vector<OptimizerSpan> DistributedAdamW::StateSpans() const {
  std::vector<OptimizerSpan> spans;
  for (int g = 0; g < kNumParamGroups; ++g) {
    const GroupShard& s = groups_[g];
    if (s.count == 0) continue;  // the shard lies in the padding
    std::vector<OptimizerSpan> group =
        OptimizerSpansOf(params_, static_cast<ParamGroup>(g), s.begin, s.master.Slice(0, s.count),
                         s.m.Slice(0, s.count), s.v.Slice(0, s.count));
    spans.insert(spans.end(), group.begin(), group.end());
  }
  return spans;
}

int64_t DistributedAdamW::StateBytes() const {
  int64_t bytes = 0;
  for (const GroupShard& s : groups_) {
    if (s.elements > 0) bytes += static_cast<int64_t>(s.m.nbytes() + s.v.nbytes());
  }
  return bytes;
}

int64_t DistributedAdamW::MasterShardBytes() const {
  int64_t bytes = 0;
  for (const GroupShard& s : groups_) {
    if (s.elements > 0 && params_.masters_sharded())
      bytes += static_cast<int64_t>(s.master.nbytes());
  }
  return bytes;
}

double DistributedAdamW::GradientSumOfSquares(const CountsTowardsNorm& counts) {
  const Context& ctx = params_.context();
  std::vector<Tensor> counted;
  for (const ParameterSet::Entry& e : params_.entries()) {
    if (!e.trainable) continue;  // no gradient
    const GroupShard& s = groups_[static_cast<int>(e.group)];
    const int64_t lo = std::max(e.offset, s.begin);
    const int64_t hi = std::min(e.offset + e.value.numel(), s.begin + s.count);
    if (lo < hi && counts(e.name)) counted.push_back(s.grad.Slice(lo - s.begin, hi - s.begin));
  }
  return dp_.AllReduceScalar(counted.empty() ? 0.0 : ops::SumOfSquares(ctx, counted),
                             ReduceOp::kSum);
}

void DistributedAdamW::ScaleGradients(double coefficient) {
  const Context& ctx = params_.context();
  for (GroupShard& s : groups_) {
    if (s.elements > 0) ops::Scale(ctx, s.grad, coefficient, s.grad);
  }
}

void DistributedAdamW::Step(const Context& ctx, double lr) {
  ++steps_;
  for (int g = 0; g < kNumParamGroups; ++g) {
    GroupShard& s = groups_[g];
    if (s.count == 0) continue;
    Tensor master = s.master.Slice(0, s.count);
    Tensor m = s.m.Slice(0, s.count), v = s.v.Slice(0, s.count);
    Tensor no_model_copy;  // refreshed for the whole group after the all-gather
    ops::AdamWStep(ctx, master, s.grad.Slice(0, s.count), m, v, no_model_copy,
                   GroupHyperParams(settings_, static_cast<ParamGroup>(g), lr), steps_);
  }
  if (refresh_) {
    refresh_();
  } else {
    RefreshModelFromShards();
  }
}

Tensor DistributedAdamW::MasterShard(ParamGroup group) const {
  const GroupShard& s = groups_[static_cast<int>(group)];
  return s.count > 0 ? s.master.Slice(0, s.count) : s.grad.Slice(0, 0);
}

void DistributedAdamW::RefreshModelFromShards() {
  if (!params_.masters_sharded()) {
    AllGatherMasters();  // into the values, which are the masters
    return;
  }
  // The step's gradients are used: their buffers hold the whole masters for the model copy.
  params_.PlaceWholeMastersInGradients();
  AllGatherMasters();
  params_.SyncModelCopy();
  params_.DropWholeMasters();  // the next step accumulates from zero, over a zero tail
}

void DistributedAdamW::Restored(int64_t steps_taken) {
  RefreshModelFromShards();
  steps_ = steps_taken;
}

void DistributedAdamW::GatherMasters() {
  if (!params_.masters_sharded()) return;
  params_.PlaceWholeMastersInGradients();
  AllGatherMasters();
}

void DistributedAdamW::ReleaseMasters() {
  if (params_.masters_sharded()) params_.DropWholeMasters();
}

void DistributedAdamW::AllGatherMasters() {
  const Context& ctx = params_.context();
  for (int g = 0; g < kNumParamGroups; ++g) {
    GroupShard& s = groups_[g];
    if (s.elements == 0) continue;
    const auto group = static_cast<ParamGroup>(g);
    // s.grad carries this rank's shard, zero-padded past the group's end.
    ops::Fill(ctx, s.grad, 0.0);
    if (s.count > 0) {
      Tensor head = s.grad.Slice(0, s.count);
      CopyTensor(ctx, s.master.Slice(0, s.count), head);
    }
    Tensor& gathered = params_.padded_grads(group);
    dp_.AllGather(s.grad, gathered);
    if (!params_.masters_sharded()) {
      CopyTensor(ctx, gathered.Slice(0, s.elements), params_.masters(group));
      ops::Fill(ctx, gathered, 0.0);  // the next step accumulates from zero, over a zero tail
    }
  }
}

}  // namespace kelvin::parallel
