// Member lookup and the backend factory.
#include "parallel/comm/communicator_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/mpi_check.h"
#include "parallel/comm/mpi_communicator.h"
#if KELVIN_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace kelvin::parallel {

std::vector<int> WorldRanksOf(MPI_Comm comm) {
  int size = 0;
  KELVIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  KELVIN_MPI_CHECK(MPI_Comm_group(comm, &group));
  KELVIN_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  std::vector<int> ranks(static_cast<size_t>(size)), world_ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  KELVIN_MPI_CHECK(
      MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world_ranks.data()));
  KELVIN_MPI_CHECK(MPI_Group_free(&group));
  KELVIN_MPI_CHECK(MPI_Group_free(&world_group));
  return world_ranks;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(CommBackend backend, MPI_Comm comm,
                                                                 std::string_view role,
                                                                 const CommunicatorOptions& options,
                                                                 const Context& ctx) {
  if (!(options.timeout_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("communicator ", std::string(role),
                                                   ": timeout_seconds=", options.timeout_seconds,
                                                   " must be > 0"));
  }
  switch (backend) {
    case CommBackend::kMpi:
      return std::unique_ptr<Communicator>(
          std::make_unique<MpiCommunicator>(comm, role, options, ctx));
    case CommBackend::kNccl:
#if KELVIN_WITH_CUDA
      return NcclCommunicator::Create(comm, role, options, ctx);
#else
      return absl::FailedPreconditionError(
          absl::StrCat("communicator ", std::string(role),
                       ": the NCCL backend needs a CUDA build (Kelvin was built with "
                       "KELVIN_CUDA=OFF); use the MPI backend"));
#endif
  }
  KELVIN_FATAL() << "unknown CommBackend " << static_cast<int>(backend);
}

}  // namespace kelvin::parallel
