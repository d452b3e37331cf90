// AsyncCheckpointSaver: checkpoint.async_save. A save takes the rank's training state to host
// memory (PendingCheckpoint::Begin, collective) and writes its part file on a thread of its own
// while training goes on; the cost is a host copy of the rank's state while it is written.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "training/checkpoint/checkpoint.h"

namespace kelvin::training {

// The checkpoint is committed (every part agreed written, the directory renamed: collective) once
// every rank's write has finished, which the trainer learns with the per-step agreement it already
// makes, or when the next save, the end of the run or a preemption needs it. Until then it is a
// .partial directory that resume ignores, so a crash mid-write loses only that save.
class AsyncCheckpointSaver {
 public:
  AsyncCheckpointSaver() = default;
  AsyncCheckpointSaver(const AsyncCheckpointSaver&) = delete;
  AsyncCheckpointSaver& operator=(const AsyncCheckpointSaver&) = delete;
  // Waits for a write still running (an error left it uncommitted: its directory stays .partial).
  ~AsyncCheckpointSaver();

  // Starts writing this rank's part of `checkpoint` in the background (none may be in flight).
  void Start(PendingCheckpoint checkpoint);
  bool in_flight() const { return pending_.has_value(); }
  // Whether this rank's part is written (or failed), without waiting.
  bool PartFinished() const { return finished_.load(std::memory_order_acquire); }
  // Waits for this rank's part, then commits the checkpoint (collective over `world`, which every
  // rank calls at the same point); returns its path. Errors name the part and the rank that failed.
  absl::StatusOr<std::string> Finish(parallel::Communicator& world);

 private:
  std::optional<PendingCheckpoint> pending_;
  std::thread writer_;
  absl::Status written_;  // the writer's outcome, read after joining it
  std::atomic<bool> finished_{false};
};

}  // namespace kelvin::training
