// One training at a time per checkpoint directory: an advisory lock (flock) on
// checkpoint.dir/kelvin.lock, taken by world rank 0 before the run writes anything there, removed
// with it at the end, and released by the kernel when the process dies (a crash or a SLURM
// requeue: the stale file is then locked afresh). The file records who holds it, for the message
// a second training gets.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace kelvin::training {

class CheckpointDirectoryLock {
 public:
  // Creates `dir` if needed and locks it. A lock held by another process (of this host or, on a
  // filesystem with shared locks, another) is an error naming the holder; a filesystem without
  // locks gives a lock that holds nothing, with a warning logged.
  static absl::StatusOr<CheckpointDirectoryLock> Acquire(const std::string& dir);

  CheckpointDirectoryLock(CheckpointDirectoryLock&& other) noexcept;
  CheckpointDirectoryLock& operator=(CheckpointDirectoryLock&& other) noexcept;
  CheckpointDirectoryLock(const CheckpointDirectoryLock&) = delete;
  CheckpointDirectoryLock& operator=(const CheckpointDirectoryLock&) = delete;
  ~CheckpointDirectoryLock();

  bool held() const { return fd_ >= 0; }

 private:
  CheckpointDirectoryLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void Release();  // removes the file, then unlocks it
  int fd_ = -1;    // the open, locked kelvin.lock; -1 when nothing is held
  std::string path_;
};

}  // namespace kelvin::training
