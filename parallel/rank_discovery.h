// Rank discovery: this process's world rank, world size and node-local rank, from MPI when it is
// initialised, else from the launcher's environment (mpirun, PMIx, SLURM srun, torchrun-style).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kelvin::parallel {

struct RankInfo {
  int rank = 0;        // in [0, world_size)
  int world_size = 1;  // >= 1
  int local_rank = 0;  // index among this node's processes (picks the GPU)
  std::string source;  // where the numbers came from: "MPI", "OMPI_COMM_WORLD_*", "SLURM_*", ...
};

// Reads one environment variable; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The process's real environment (std::getenv).
EnvLookup ProcessEnvironment();

// Parses the launcher's variables. The first family whose rank variable is set is used (the later
// ones are not read), in this order: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK (mpirun),
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun; SLURM_PROCID=0 without SLURM_NTASKS is a batch
// script's own environment and does not count), RANK/WORLD_SIZE/LOCAL_RANK (torchrun-style);
// none: a single process (0 of 1). PMIX_RANK (set by mpirun and srun --mpi=pmix) must agree with
// the chosen rank; alone it names no world size and is an error. SLURM_* come after OMPI_*
// because under mpirun inside a SLURM allocation every rank sees SLURM_PROCID=0. Errors
// (InvalidArgument, naming the variables and their values): a value that is not a non-negative
// integer, the chosen family without its size or local rank, rank or local rank >= size,
// PMIX_RANK disagreeing.
absl::StatusOr<RankInfo> RankInfoFromEnvironment(const EnvLookup& env);

// MPI_COMM_WORLD's rank and size when MPI is initialised (local rank from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): a collective call, so every rank must call this
// together), else RankInfoFromEnvironment(ProcessEnvironment()). With MPI, the launcher's
// variables must agree with MPI (CheckLauncherAgreesWithMpi): `launcher` as read before MPI_Init
// (a singleton MPI_Init sets PMIX_RANK itself), else the environment as it is now. E.g. 4
// processes started by `srun --mpi=none` are 4 singleton MPI worlds of size 1 while
// SLURM_NTASKS=4: an error on each.
absl::StatusOr<RankInfo> DiscoverRank(const std::optional<RankInfo>& launcher = std::nullopt);

// OK when the launcher's variables name no launch (a single process) or the same rank and size
// as MPI; FailedPrecondition otherwise, saying how to launch (srun --mpi=pmix, mpirun).
absl::Status CheckLauncherAgreesWithMpi(const RankInfo& mpi, const RankInfo& launcher);

// The CUDA device of a process with this local rank: the local rank itself; FailedPrecondition
// when the node has fewer devices ("local rank 3 needs CUDA device 3, but this node has 2: ...").
absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank);

}  // namespace kelvin::parallel
