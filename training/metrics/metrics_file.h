// MetricsFile: a run's scalars as JSON Lines (logging.metrics_file), one object per step and per
// evaluation keyed by TensorBoard's tags, so that `pandas.read_json(path, lines=True)` reads a
// run's curves without TensorBoard (format: README, Formats). Not thread-safe; world rank 0 writes
// it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kelvin::training {

// OK when `path` is missing, empty or starts with a metrics record ({"step": N, ...}): a run
// empties or rewrites it, so any other file there (the job file, a data file, a resolved config)
// is an error naming logging.metrics_file, and is left as it is.
absl::Status CheckIsMetricsFile(const std::filesystem::path& path);

class MetricsFile {
 public:
  // Opens `path` for appending (its directory is created), keeping the records of steps up to
  // `resumed_steps` (0: a fresh run, an existing file is emptied). A resumed run thus drops the
  // records of the steps after its checkpoint (the stopped run had gone past it) and a line a
  // crash cut short, so the file holds one history, no step recorded twice. An existing file that
  // does not start with a record (the job file, a data file) is an error, left as it is.
  static absl::StatusOr<MetricsFile> Open(const std::string& path, int64_t resumed_steps);

  // One record: {"step": step, tag: value, ...}; a non-finite value is written as null. Each
  // record is flushed as it is written.
  absl::Status Append(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

 private:
  MetricsFile(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file, &std::fclose) {}

  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

}  // namespace kelvin::training
