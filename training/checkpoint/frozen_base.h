// A frozen-base checkpoint's base (checkpoint.json's "base") against the job's: the trainable
// tensors fit only the base they were trained on, so a resume, `kelvin eval` or a read of the
// weights over another base is refused.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint_format.h"

namespace kelvin::training {

// The record of the frozen base `model` holds (nullopt for a full fine-tune).
std::optional<FrozenBaseRecord> FrozenBaseRecordOf(const models::LlamaModel& model);

// OK when the job has no frozen base (`job` nullopt) or the checkpoint at `checkpoint` records
// the same fingerprint. A checkpoint that records none (written before Kelvin kept it) is accepted
// with a warning that its base cannot be checked. Another fingerprint is a FailedPrecondition
// error naming the checkpoint, both bases and what to do.
absl::Status CheckFrozenBase(const std::string& checkpoint,
                             const std::optional<FrozenBaseRecord>& recorded,
                             const std::optional<FrozenBaseRecord>& job);

}  // namespace kelvin::training
