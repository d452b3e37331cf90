// A rank's parameters and optimizer moments as named regions of the full model's tensors.
#include "training/checkpoint/training_state.h"

#include "absl/strings/str_cat.h"
#include "training/checkpoint/frozen_base.h"

namespace kelvin::training {
namespace {

std::string MomentName(const char* moment, const std::string& parameter) {
  return absl::StrCat("adamw.", moment, ":", parameter);
}

}  // namespace

std::set<std::string> CheckpointTensorNames(const models::LlamaConfig& config) {
  std::set<std::string> names;
  for (const models::LlamaParameterSpec& spec :
       models::StageParameterSpecs(config, models::StageLayoutOf(config, 0, 1, 1))) {
    if (!spec.trainable) continue;  // a frozen base is the job's model source, not checkpointed
    names.insert(spec.name);
    names.insert(MomentName("m", spec.name));
    names.insert(MomentName("v", spec.name));
  }
  return names;
}

TrainingState TrainingStateOf(const models::LlamaModel& model,
                              const std::vector<OptimizerSpan>& spans, int64_t optimizer_steps,
                              const ReplicaPlace& place, const std::string& layout) {
  TrainingState state;
  state.layout = layout;
  state.optimizer_steps = optimizer_steps;
  state.job_tensors = CheckpointTensorNames(model.config());
  state.base = FrozenBaseRecordOf(model);
  const bool writes = place.sharded_optimizer || place.replica == 0;
  for (const OptimizerSpan& span : spans) {
    const io::TensorRegion region = model.RegionOf(span.parameter).Elements(span.begin, span.count);
    const bool written = writes && model.IsCanonicalCopy(span.parameter);
    state.tensors.push_back({span.parameter, region, span.master, written});
    state.tensors.push_back({MomentName("m", span.parameter), region, span.m, written});
    state.tensors.push_back({MomentName("v", span.parameter), region, span.v, written});
  }
  return state;
}

}  // namespace kelvin::training
