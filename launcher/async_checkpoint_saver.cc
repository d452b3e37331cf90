// The background part writer of checkpoint.async_save: one thread per save, joined before the
// commit.
#include "launcher/async_checkpoint_saver.h"

#include <utility>

#include "core/check.h"

namespace kelvin::launcher {

AsyncCheckpointSaver::~AsyncCheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void AsyncCheckpointSaver::Start(PendingCheckpoint checkpoint) {
  KELVIN_CHECK(!in_flight()) << "a checkpoint save is already in flight";
  pending_.emplace(std::move(checkpoint));
  finished_.store(false, std::memory_order_release);
  writer_ = std::thread([this] {
    written_ = pending_->WritePart();  // no communication: MPI stays on the training thread
    finished_.store(true, std::memory_order_release);
  });
}

absl::StatusOr<std::string> AsyncCheckpointSaver::Finish(parallel::Communicator* world) {
  KELVIN_CHECK(in_flight()) << "no checkpoint save in flight";
  writer_.join();
  const PendingCheckpoint checkpoint = std::move(*pending_);
  pending_.reset();
  return checkpoint.Commit(written_, world);
}

}  // namespace kelvin::launcher
