// Making communicators: over an MPI communicator's members, with the MPI or NCCL backend. Kept
// apart from the Communicator interface (parallel/comm/communicator.h) so that code which only uses
// a group (the models) does not depend on MPI.
#pragma once

#include <mpi.h>

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// The world ranks of `comm`'s members, by rank in `comm`.
std::vector<int> WorldRanksOf(MPI_Comm comm);

// A communicator over the members of `comm` (which the caller keeps and may free afterwards):
// collective over `comm`. `role` names it in messages ("tp", "dp", "world"). Tensors on CUDA
// devices are ordered on `ctx`'s stream. kNccl needs a CUDA build and a CUDA `ctx` (one device per
// process); FailedPrecondition otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(CommBackend backend, MPI_Comm comm,
                                                                 std::string_view role,
                                                                 const CommunicatorOptions& options,
                                                                 const Context& ctx);

}  // namespace kelvin::parallel
