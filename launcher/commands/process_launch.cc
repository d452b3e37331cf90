// MPI for the commands that run on every rank: initialised and finalised here, ranks discovered
// and checked against the launcher's variables.
#include "launcher/commands/process_launch.h"

#include <mpi.h>

#include "core/logging.h"
#include "core/status.h"
#include "launcher/config/job_config.h"
#include "parallel/rank_discovery.h"

namespace kelvin::launcher {

int RunOnEveryRank(const JobArguments& job_arguments,
                   const std::function<int(const config::JobConfig& job, int world_rank)>& run) {
  // The launcher's variables as it set them (a singleton MPI_Init adds PMIX_RANK).
  const absl::StatusOr<parallel::RankInfo> launched =
      parallel::RankInfoFromEnvironment(parallel::ProcessEnvironment());
  if (!launched.ok()) return Fail(launched.status());
  // FUNNELED: only this thread calls MPI (checkpoint.async_save's writer thread never does).
  int threading = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &threading);
  const absl::StatusOr<parallel::RankInfo> rank = parallel::DiscoverRank(*launched);
  int result = 0;
  if (!rank.ok()) {
    result = Fail(rank.status());  // every process finds it alike: none waits for another
  } else {
    if (rank->world_size > 1) SetLogRank(rank->rank);  // progress lines from rank 0 only
    const absl::StatusOr<config::JobConfig> job =
        LoadJobConfig(job_arguments.path, job_arguments.overrides);
    result = job.ok() ? run(*job, rank->rank) : Fail(job.status());
    // A failure may be one rank's alone: abort the others. A preemption stop is every rank's.
    if (result != 0 && result != kExitPreempted && rank->world_size > 1) {
      MPI_Abort(MPI_COMM_WORLD, result);
    }
  }
  MPI_Finalize();
  return result;
}

absl::StatusOr<int> LaunchedProcesses() {
  KELVIN_ASSIGN_OR_RETURN(const parallel::RankInfo launched,
                          parallel::RankInfoFromEnvironment(parallel::ProcessEnvironment()));
  return launched.world_size;
}

int RunOnRankZero(const std::function<int()>& run) {
  const absl::StatusOr<parallel::RankInfo> launched =
      parallel::RankInfoFromEnvironment(parallel::ProcessEnvironment());
  if (!launched.ok()) return Fail(launched.status());
  return launched->rank == 0 ? run() : 0;
}

}  // namespace kelvin::launcher
