// Each checkpointed parameter's region read from the checkpoint's parts and assigned to the model
// (in its dtype, on its device).
#include "inference/checkpoint_weights.h"

#include <set>
#include <string>

#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/frozen_base.h"
#include "training/checkpoint/training_state.h"

namespace kelvin::inference {

absl::Status ReadCheckpointWeights(const std::string& path, const std::string& job_name,
                                   models::LlamaModel& model) {
  KELVIN_ASSIGN_OR_RETURN(const training::CheckpointReader reader,
                          training::OpenJobCheckpoint(path, job_name));
  const std::set<std::string> held = training::CheckpointTensorNames(model.config());
  KELVIN_RETURN_IF_ERROR(training::CheckNoOtherTensors(reader, held));
  KELVIN_RETURN_IF_ERROR(
      training::CheckFrozenBase(path, reader.index().base, training::FrozenBaseRecordOf(model)));
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    // A frozen base is not in the checkpoint: the model holds it from the job's source already.
    if (!held.contains(e.name)) continue;
    const io::TensorRegion mine = model.RegionOf(e.name);  // this rank's part of the tensor
    KELVIN_RETURN_IF_ERROR(reader.Check(e.name, mine));
    KELVIN_ASSIGN_OR_RETURN(const Tensor weights, reader.Read(e.name, mine));
    model.parameters().Assign(e.name, weights.View(e.shape));
  }
  return absl::OkStatus();
}

}  // namespace kelvin::inference
