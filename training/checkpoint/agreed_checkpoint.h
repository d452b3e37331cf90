// Which checkpoint of checkpoint.dir every rank of a job reads: the chosen one (newest, a step, the
// best) or the list of complete ones, the same on every rank, a listing error or a split view of
// a shared filesystem an error on every rank. The trainer's resume and `kelvin eval` use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/comm/communicator.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::training {

// The chosen checkpoint of `dir` (nullopt: none, for the newest), the same on every rank of
// `world`. Collective.
absl::StatusOr<std::optional<std::string>> AgreedCheckpoint(parallel::Communicator& world,
                                                            const std::string& dir,
                                                            const CheckpointChoice& choice);

// The steps of `dir`'s complete checkpoints, oldest first, as world rank 0 lists them; an error
// on every rank naming the directory when there is none (`consequence` ends it, e.g. ": nothing
// to evaluate"). Collective.
absl::StatusOr<std::vector<int64_t>> AgreedCheckpointSteps(parallel::Communicator& world,
                                                           const std::string& dir,
                                                           absl::string_view consequence);

}  // namespace kelvin::training
