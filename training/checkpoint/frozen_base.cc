// The frozen base's record and its comparison on a restore.
#include "training/checkpoint/frozen_base.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace kelvin::training {

std::optional<FrozenBaseRecord> FrozenBaseRecordOf(const models::LlamaModel& model) {
  const std::optional<models::LlamaBase>& base = model.frozen_base();
  if (!base.has_value()) return std::nullopt;
  return FrozenBaseRecord{base->source, base->fingerprint};
}

absl::Status CheckFrozenBase(const std::string& checkpoint,
                             const std::optional<FrozenBaseRecord>& recorded,
                             const std::optional<FrozenBaseRecord>& job) {
  if (!job.has_value()) return absl::OkStatus();
  if (!recorded.has_value()) {
    KLOG_RANK0(WARNING) << checkpoint
                        << " records no frozen base (an older Kelvin wrote it): its trainable "
                           "tensors go over this job's base, "
                        << job->source << " (fingerprint " << FormatChecksum(job->fingerprint)
                        << "), unchecked; they are right only if that is the base it was "
                           "trained on";
    return absl::OkStatus();
  }
  if (recorded->fingerprint == job->fingerprint) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      checkpoint, " was trained on the frozen base ", recorded->source, " (fingerprint ",
      FormatChecksum(recorded->fingerprint), "), but this job's base is ", job->source,
      " (fingerprint ", FormatChecksum(job->fingerprint),
      "): its trainable tensors fit only the base they were trained on. Give the job that base "
      "(model.hf_dir, or model.preset with the same training.seed), or start afresh "
      "(checkpoint.resume=NEVER, or another checkpoint.dir)"));
}

}  // namespace kelvin::training
