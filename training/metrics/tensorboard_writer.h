// TensorBoardWriter: scalar summaries in TensorBoard's event-file format, so `tensorboard
// --logdir` shows a run's loss, learning rate, gradient norm, throughput, communication share,
// evaluation and SSA temperature curves. One file per run (events.out.tfevents.<time>.<host>.<pid>
// in the directory); every write is flushed, so a run that dies keeps what it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kelvin::training {

// TFRecord's masking of the CRC-32C (core/io/crc32c.h) of `bytes`.
uint32_t MaskedCrc32c(std::string_view bytes);

// The file is created with the first scalar: a run that logs none leaves none, and a first write
// that fails removes it.
class TensorBoardWriter {
 public:
  // Creates `directory` if needed and names the run's event file in it; errors name the path.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar point of the curve `tag` ("train/loss") at `step`; DataLoss when it cannot write.
  absl::Status AddScalar(const std::string& tag, int64_t step, double value);
  const std::string& path() const { return path_; }

 private:
  explicit TensorBoardWriter(std::string path) : path_(std::move(path)) {}
  // Creates the file with its version record, the first record, naming the format version (before
  // the first scalar).
  absl::Status Create();
  // Appends one TFRecord holding `event` (a serialized Event) and flushes. TFRecord framing: the
  // length, the masked CRC32C of the length, the serialized Event, the masked CRC32C of it.
  absl::Status WriteRecord(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;  // until the first scalar
};

}  // namespace kelvin::training
