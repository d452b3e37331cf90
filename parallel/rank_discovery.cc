// Rank discovery from MPI or the launcher's environment variables, with consistency checks.
#include "parallel/rank_discovery.h"

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "core/mpi_check.h"
#include "core/status.h"

namespace kelvin::parallel {
namespace {

// One launcher's variables: rank, world size and local rank.
struct VariableFamily {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* source;
  // SLURM: a batch script itself sees SLURM_PROCID=0 without SLURM_NTASKS when the job gave no
  // --ntasks; it is one process, not a task of srun, and the family does not apply.
  bool rank_zero_without_size_is_not_a_launch;
};

constexpr VariableFamily kFamilies[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_* (mpirun)", false},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_* (srun)", true},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK/WORLD_SIZE/LOCAL_RANK", false},
};

// The variable's value as a non-negative int; nullopt when it is unset.
absl::StatusOr<std::optional<int>> ReadCount(const EnvLookup& env, const char* name) {
  const std::optional<std::string> text = env(name);
  if (!text.has_value()) return std::optional<int>();
  int value = 0;
  if (!absl::SimpleAtoi(*text, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch environment: ", name, "=\"", *text,
                     "\" is not a non-negative integer; fix or unset it"));
  }
  return std::optional<int>(value);
}

// The family's numbers; nullopt when it does not apply (its rank variable is unset).
absl::StatusOr<std::optional<RankInfo>> ReadFamily(const EnvLookup& env,
                                                   const VariableFamily& family) {
  KELVIN_ASSIGN_OR_RETURN(const std::optional<int> rank, ReadCount(env, family.rank));
  if (!rank.has_value()) return std::optional<RankInfo>();
  KELVIN_ASSIGN_OR_RETURN(const std::optional<int> size, ReadCount(env, family.size));
  KELVIN_ASSIGN_OR_RETURN(const std::optional<int> local_rank, ReadCount(env, family.local_rank));
  if (family.rank_zero_without_size_is_not_a_launch && *rank == 0 && !size.has_value()) {
    return std::optional<RankInfo>();
  }
  for (const auto& [name, value] :
       {std::pair{family.size, size}, {family.local_rank, local_rank}}) {
    if (!value.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launch environment: ", family.rank, "=", *rank, " is set but ", name,
          " is not; a launcher sets both (set ", name, ", or unset ", family.rank, ")"));
    }
  }
  if (*size < 1 || *rank >= *size || *local_rank >= *size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launch environment: inconsistent ", family.rank, "=", *rank, ", ", family.size, "=", *size,
        ", ", family.local_rank, "=", *local_rank, ": need size >= 1 and rank, local rank < size"));
  }
  return std::optional<RankInfo>(RankInfo{*rank, *size, *local_rank, family.source});
}

}  // namespace

EnvLookup ProcessEnvironment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<RankInfo> RankInfoFromEnvironment(const EnvLookup& env) {
  std::optional<RankInfo> found;  // from the first family that applies; the later ones are unread
  for (const VariableFamily& family : kFamilies) {
    KELVIN_ASSIGN_OR_RETURN(found, ReadFamily(env, family));
    if (found.has_value()) break;
  }
  KELVIN_ASSIGN_OR_RETURN(const std::optional<int> pmix_rank, ReadCount(env, "PMIX_RANK"));
  if (!found.has_value()) {
    if (pmix_rank.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launch environment: PMIX_RANK=", *pmix_rank,
          " is set but no world size is (OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or WORLD_SIZE): "
          "launch with mpirun or srun --mpi=pmix"));
    }
    return RankInfo{0, 1, 0, "no launcher variables (a single process)"};
  }
  if (pmix_rank.has_value() && *pmix_rank != found->rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch environment: PMIX_RANK=", *pmix_rank, " disagrees with rank ",
                     found->rank, " from ", found->source,
                     "; the variables come from different launches (clear stale ones)"));
  }
  return *found;
}

absl::Status CheckLauncherAgreesWithMpi(const RankInfo& mpi, const RankInfo& launcher) {
  const bool launcher_says_nothing = launcher.world_size == 1 && launcher.rank == 0 &&
                                     launcher.source.find("single process") != std::string::npos;
  if (launcher_says_nothing ||
      (launcher.rank == mpi.rank && launcher.world_size == mpi.world_size)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "launch environment: MPI sees rank ", mpi.rank, " of ", mpi.world_size, " but ",
      launcher.source, " says rank ", launcher.rank, " of ", launcher.world_size,
      ": the processes were not started as one MPI job; start every rank with srun --mpi=pmix "
      "(the batch script of kelvin launch does) or mpirun -np ",
      launcher.world_size, ", or unset the launcher's variables to run one process"));
}

absl::StatusOr<RankInfo> DiscoverRank(const std::optional<RankInfo>& launcher) {
  int initialized = 0, finalized = 0;
  KELVIN_MPI_CHECK(MPI_Initialized(&initialized));
  KELVIN_MPI_CHECK(MPI_Finalized(&finalized));
  if (!initialized || finalized) return RankInfoFromEnvironment(ProcessEnvironment());

  RankInfo info;
  info.source = "MPI";
  KELVIN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  KELVIN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &info.world_size));
  MPI_Comm node = MPI_COMM_NULL;
  KELVIN_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node));
  KELVIN_MPI_CHECK(MPI_Comm_rank(node, &info.local_rank));
  KELVIN_MPI_CHECK(MPI_Comm_free(&node));

  if (launcher.has_value()) {
    KELVIN_RETURN_IF_ERROR(CheckLauncherAgreesWithMpi(info, *launcher));
  } else {
    KELVIN_ASSIGN_OR_RETURN(const RankInfo now, RankInfoFromEnvironment(ProcessEnvironment()));
    KELVIN_RETURN_IF_ERROR(CheckLauncherAgreesWithMpi(info, now));
  }
  return info;
}

absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank) {
  const int devices = CudaDeviceCount();
  if (local_rank >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local rank ", local_rank, " needs CUDA device ", local_rank, ", but this node has ",
        devices, devices == 0 ? absl::StrCat(" (", CudaUnavailableReason(), ")") : "",
        ": start at most one process per GPU on each node"));
  }
  return local_rank;
}

}  // namespace kelvin::parallel
