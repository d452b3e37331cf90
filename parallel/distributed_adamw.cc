// ZeRO-1 on the host: reduce-scatter of the padded flat gradients, AdamW on the shard, all-gather
// of the parameters.
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
    const Tensor& values = params.values(static_cast<ParamGroup>(g));
    if (!values.defined()) continue;
    GroupShard& s = groups_[g];
    s.elements = values.numel();
    s.shard = (s.elements + ranks - 1) / ranks;
    s.begin = dp.rank() * s.shard;
    s.count = std::clamp<int64_t>(s.elements - s.begin, 0, s.shard);
    const DType grad_dtype = params.grads(static_cast<ParamGroup>(g)).dtype();
    s.padded = Tensor::ZerosCpu({ranks * s.shard}, values.dtype());
    s.grad = Tensor::ZerosCpu({s.shard}, grad_dtype);
    s.m = Tensor::ZerosCpu({s.shard}, values.dtype());
    s.v = Tensor::ZerosCpu({s.shard}, values.dtype());
  }
}

std::vector<std::pair<std::string, Tensor>> DistributedAdamW::StateTensors() const {
  std::vector<std::pair<std::string, Tensor>> state;
  for (int g = 0; g < kNumParamGroups; ++g) {
    const GroupShard& s = groups_[g];
    if (s.elements > 0) AppendMomentState(static_cast<ParamGroup>(g), s.m, s.v, state);
  }
  return state;
}

void DistributedAdamW::ReduceScatterGradients() {
  const Context ctx = Context::Cpu();
  for (int g = 0; g < kNumParamGroups; ++g) {
    GroupShard& s = groups_[g];
    if (s.elements == 0) continue;
    Tensor used = s.padded.Slice(0, s.elements);  // the tail [E, D*S) stays zero
    CopyTensor(ctx, params_.grads(static_cast<ParamGroup>(g)), used);
    dp_.ReduceScatter(s.padded, s.grad, ReduceOp::kSum);
  }
}

double DistributedAdamW::ShardSumOfSquares(
    const std::function<bool(const std::string&)>& counts) const {
  const Context ctx = Context::Cpu();
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
  const Context ctx = Context::Cpu();
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
    Tensor& values = params_.values(group);
    if (s.count > 0) {
      Tensor master = values.Slice(s.begin, s.begin + s.count);
      Tensor m = s.m.Slice(0, s.count), v = s.v.Slice(0, s.count);
      Tensor no_model_copy;
      ops::AdamWStep(ctx, master, s.grad.Slice(0, s.count), m, v, no_model_copy,
                     GroupHyperParams(settings_, group, lr), steps_);
    }
    // Every rank's updated shard into everyone's parameters.
    Tensor mine = Tensor::ZerosCpu({s.shard}, values.dtype());
    if (s.count > 0) {
      Tensor head = mine.Slice(0, s.count);
      CopyTensor(ctx, values.Slice(s.begin, s.begin + s.count), head);
    }
    dp_.AllGather(mine, s.padded);
    CopyTensor(ctx, s.padded.Slice(0, s.elements), values);
    ops::Fill(ctx, s.padded, 0.0);  // the next reduce-scatter expects a zero tail
  }
}

}  // namespace kelvin::parallel
