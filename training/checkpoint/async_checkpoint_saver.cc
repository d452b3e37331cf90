// The background part writer of checkpoint.async_save: one thread per save, joined before the
// commit.
#include "training/checkpoint/async_checkpoint_saver.h"

#include <pthread.h>

#include <csignal>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "training/checkpoint/preemption.h"

namespace kelvin::training {

AsyncCheckpointSaver::~AsyncCheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void AsyncCheckpointSaver::Start(PendingCheckpoint checkpoint) {
  KELVIN_CHECK(!in_flight()) << "a checkpoint save is already in flight";
  pending_.emplace(std::move(checkpoint));
  finished_.store(false, std::memory_order_release);
  // The stop signals go to the training thread, not to the writer's system calls.
  sigset_t before;
  BlockStopSignals(&before);
  writer_ = std::thread([this] {  // inherits the blocked signals
    try {
      written_ = pending_->WritePart();  // no communication: MPI stays on the training thread
    } catch (const std::exception& e) {
      written_ = absl::InternalError(
          absl::StrCat("writing ", pending_->part_file(), " threw: ", e.what()));
    }
    finished_.store(true, std::memory_order_release);
  });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

absl::StatusOr<std::string> AsyncCheckpointSaver::Finish(parallel::Communicator& world) {
  KELVIN_CHECK(in_flight()) << "no checkpoint save in flight";
  writer_.join();
  const PendingCheckpoint checkpoint = std::move(*pending_);
  pending_.reset();
  return checkpoint.Commit(written_, world);
}

}  // namespace kelvin::training
