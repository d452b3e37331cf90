// ZeRO-1 on the parameters' device: reduce-scatter of the padded flat gradients, AdamW on the
// shard of the master weights, all-gather of the master weights through the gradient buffer (then
// the model copy refreshed).
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
  const int64_t ranks = dp.size();
  for (int g = 0; g < kNumParamGroups; ++g) {
    const Tensor& masters = params.masters(static_cast<ParamGroup>(g));
    if (!masters.defined()) continue;
    GroupShard& s = groups_[g];
    s.elements = masters.numel();
    s.shard = (s.elements + ranks - 1) / ranks;
    s.begin = dp.rank() * s.shard;
    s.count = std::clamp<int64_t>(s.elements - s.begin, 0, s.shard);
    KELVIN_CHECK(params.padded_grads(static_cast<ParamGroup>(g)).numel() == ranks * s.shard)
        << "DistributedAdamW over " << ranks
        << " ranks needs ParameterSet::Allocate with gradient_shards " << ranks;
    // gradients share the masters' dtype (AccumDType)
    s.grad = Zeros(params.context(), {s.shard}, masters.dtype());
    s.m = Zeros(params.context(), {s.shard}, masters.dtype());
    s.v = Zeros(params.context(), {s.shard}, masters.dtype());
  }
}

std::vector<MomentSpan> DistributedAdamW::MomentSpans() const {
  std::vector<MomentSpan> spans;
  for (int g = 0; g < kNumParamGroups; ++g) {
    const GroupShard& s = groups_[g];
    if (s.count == 0) continue;  // the shard lies in the padding
    std::vector<MomentSpan> group = MomentSpansOf(params_, static_cast<ParamGroup>(g), s.begin,
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

void DistributedAdamW::ReduceScatterGradients() {
  for (int g = 0; g < kNumParamGroups; ++g) {
    GroupShard& s = groups_[g];
    if (s.elements == 0) continue;
    // The tail [E, D*S) is zero: Allocate zeroed it, Step leaves it zero.
    dp_.ReduceScatter(params_.padded_grads(static_cast<ParamGroup>(g)), s.grad, ReduceOp::kSum);
  }
}

double DistributedAdamW::ShardSumOfSquares(
    const std::function<bool(const std::string&)>& counts) const {
  const Context& ctx = params_.context();
  std::vector<Tensor> counted;
  for (const ParameterSet::Entry& e : params_.entries()) {
    const GroupShard& s = groups_[static_cast<int>(e.group)];
    const int64_t lo = std::max(e.offset, s.begin);
    const int64_t hi = std::min(e.offset + e.value.numel(), s.begin + s.count);
    if (lo < hi && counts(e.name)) counted.push_back(s.grad.Slice(lo - s.begin, hi - s.begin));
  }
  return counted.empty() ? 0.0 : ops::SumOfSquares(ctx, counted);
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
    if (s.elements == 0) continue;
    const auto group = static_cast<ParamGroup>(g);
    Tensor& masters = params_.masters(group);
    if (s.count > 0) {
      Tensor master = masters.Slice(s.begin, s.begin + s.count);
      Tensor m = s.m.Slice(0, s.count), v = s.v.Slice(0, s.count);
      Tensor no_model_copy;  // refreshed for the whole group after the all-gather
      ops::AdamWStep(ctx, master, s.grad.Slice(0, s.count), m, v, no_model_copy,
                     GroupHyperParams(settings_, group, lr), steps_);
    }
    // Every rank's updated shard into everyone's master weights; s.grad (free until the next
    // reduce-scatter) carries this rank's shard, zero-padded past the group's end.
    ops::Fill(ctx, s.grad, 0.0);
    if (s.count > 0) {
      Tensor head = s.grad.Slice(0, s.count);
      CopyTensor(ctx, masters.Slice(s.begin, s.begin + s.count), head);
    }
    Tensor& gathered = params_.padded_grads(group);  // free: the step's gradients are used
    dp_.AllGather(s.grad, gathered);
    CopyTensor(ctx, gathered.Slice(0, s.elements), masters);
    ops::Fill(ctx, gathered, 0.0);  // the next step accumulates from zero, over a zero tail
  }
  params_.SyncModelCopy();
}

}  // namespace kelvin::parallel
