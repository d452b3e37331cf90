// The files of one training checkpoint directory (what they hold: README, Formats):
// checkpoint.json, the index written by rank 0, and part_<r>_of_<N>.safetensors, one
// per process, whose metadata entry "region:<name>" places each of its tensors in its logical
// tensor and "crc32c:<name>" holds the CRC-32C of its bytes (8 hex digits), checked before any is
// used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kelvin::training {

// 4: the run's identity and the step in checkpoint.json and in each part's metadata, cross-checked
// on every read. 3 (read too): each piece's CRC-32C in its part's metadata.
inline constexpr const char* kCheckpointFormat = "kelvin-checkpoint-4";
inline constexpr const char* kCheckpointFormatWithoutIdentity = "kelvin-checkpoint-3";
inline constexpr const char* kRegionKey = "region:";    // + tensor name, in each part's metadata
inline constexpr const char* kChecksumKey = "crc32c:";  // + tensor name, in each part's metadata
inline constexpr const char* kRunKey = "run";           // in each part's metadata: the run's id
inline constexpr const char* kStepKey = "step";         // in each part's metadata: steps done

std::string PartFileName(int rank, int parts);  // "part_<rank>_of_<parts>.safetensors"
// "step_00000120" for 120 steps done, and back (nullopt for any other name, such as
// "step_00000120.partial").
std::string StepDirectoryName(int64_t step);
std::optional<int64_t> StepOfDirectoryName(const std::string& name);
// A checksum as the metadata holds it ("0a1b2c3d"), and its parse (nullopt unless 8 hex digits).
std::string FormatChecksum(uint32_t crc);
std::optional<uint32_t> ParseChecksum(const std::string& text);

// The loss-spike rule's memory (training.loss_spike, training/loss_spike.h) after a step, so that
// a resumed run judges its steps as the uninterrupted run would.
struct LossSpikeRecord {
  std::vector<double> recent_losses;  // the last steps kept, oldest first (at most the window)
  int64_t skipped_steps = 0;          // every step the run skipped (resumes included)
  int64_t skips_in_a_row = 0;         // the steps skipped since the last one kept
  bool operator==(const LossSpikeRecord&) const = default;
};
// The most recent losses a checkpoint may record (training.loss_spike.window's upper limit).
inline constexpr int64_t kMaxLossSpikeWindow = 10000;

// The frozen base a checkpoint of the trainable tensors was trained on (models::LlamaBase):
// checkpoint.json's "base": {"source": ..., "fingerprint": 8 hex digits}.
struct FrozenBaseRecord {
  std::string source;  // the Hugging Face directory, or "random weights from seed N"
  uint32_t fingerprint = 0;
  bool operator==(const FrozenBaseRecord&) const = default;
};

// What checkpoint.json records.
struct CheckpointIndex {
  std::string job, layout;
  int64_t steps_completed = 0, optimizer_steps = 0;
  int parts = 0;
  std::map<std::string, std::string> data_order;  // setting -> value
  // The held-out loss evaluated after this step, when the run evaluated at it (checkpoint.keep_best
  // keeps the checkpoint where it is lowest).
  std::optional<double> eval_loss;
  std::string
      kelvin_version;  // KelvinVersion() of the binary that wrote it ("" before it was kept)
  // The run that wrote it: 32 hex digits drawn when the run started afresh, kept by its resumes
  // ("" in a kelvin-checkpoint-3, which has none).
  std::string run_id;
  // LibraryVersions() of the process that wrote it: OpenBLAS with the kernels it chose for that
  // CPU, the CUDA libraries ("" before it was kept).
  std::string libraries;
  // The loss-spike rule's memory ("loss_spike"; nullopt before it was kept: the rule starts
  // afresh).
  std::optional<LossSpikeRecord> loss_spike;
  // The frozen base of a frozen-base job (model.peft; nullopt for a full fine-tune, and before it
  // was kept).
  std::optional<FrozenBaseRecord> base;
};

// A new run's identity: 32 random hex digits.
std::string NewRunId();

// checkpoint.json of the checkpoint directory `checkpoint`; a missing, malformed or foreign index,
// or one whose step is not the directory's (step_<N>), is an error naming the file.
absl::StatusOr<CheckpointIndex> ReadCheckpointIndex(const std::filesystem::path& checkpoint);
absl::Status WriteCheckpointIndex(const std::filesystem::path& checkpoint,
                                  const CheckpointIndex& index);

}  // namespace kelvin::training
