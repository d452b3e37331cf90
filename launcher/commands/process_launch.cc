// MPI for the commands that run on every rank: initialised and finalised here, ranks discovered
// and checked against the launcher's variables; the forward-only commands' tensor-parallel split.
#include "launcher/commands/process_launch.h"

#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/status.h"
#include "launcher/commands/rank_failures.h"
#include "launcher/config/job_config.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/process_grid.h"
#include "parallel/rank_discovery.h"
#include "training/job/job_setup.h"
#include "training/job/parallel_setup.h"

namespace kelvin::launcher {

namespace {

// MPI initialised, the launcher's variables checked against it, then `run` with the world's rank
// and size; a failure is reported once when every rank meets it, and one rank's alone aborts the
// others (rank_failures.h).
int UnderMpi(const std::function<int(int world_rank, int world_size)>& run) {
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
    if (rank->world_size == 1) {
      result = run(rank->rank, rank->world_size);
    } else {
      SetLogRank(rank->rank);             // progress lines from rank 0 only
      MPI_Comm failures = MPI_COMM_NULL;  // where the ranks compare their failures, and only that
      MPI_Comm_dup(MPI_COMM_WORLD, &failures);
      HoldFailures();
      result = SettleFailures(failures, rank->rank, run(rank->rank, rank->world_size));
      MPI_Comm_free(&failures);
    }
  }
  MPI_Finalize();
  return result;
}

// The model's tensor-parallel split over `world_size` processes (the job's own layout and batch
// play no part; a model directory has none): an error naming what does not divide.
absl::Status CheckSplit(const std::string& command, const config::JobConfig& job, int world_size) {
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                          training::ResolveModelArchitecture(job.model()));
  parallel::GridSpec spec;  // every process one tensor-parallel rank; the other counts 1
  spec.world_size = spec.tensor_parallel = world_size;
  spec.num_attention_heads = arch.num_attention_heads;
  spec.num_key_value_heads = arch.num_key_value_heads;
  spec.num_layers = arch.num_layers;
  std::vector<std::string> problems;
  if (const absl::Status valid = parallel::ValidateGridSpec(spec); !valid.ok()) {
    problems.emplace_back(valid.message());
  }
  for (const auto& [name, size] : {std::pair{"intermediate_size", arch.intermediate_size},
                                   std::pair{"vocab_size", arch.vocab_size}}) {
    if (size % world_size != 0) {
      problems.push_back(
          absl::StrCat(world_size, " does not divide the model's ", name, "=", size));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      command, " on ", world_size,
      " processes splits the model over all of them (tensor parallelism), and ",
      absl::StrJoin(problems, "; "), ": start it on another process count, or as one process"));
}

}  // namespace

int RunOnEveryRank(const JobArguments& job_arguments,
                   const std::function<int(const config::JobConfig& job, int world_rank)>& run) {
  return UnderMpi([&](int world_rank, int) {
    const absl::StatusOr<config::JobConfig> job =
        LoadJobConfig(job_arguments.path, job_arguments.overrides);
    return job.ok() ? run(*job, world_rank) : Fail(job.status());
  });
}

int RunSplitOverProcesses(const std::string& command, InferenceDevice device,
                          const std::function<absl::StatusOr<config::JobConfig>()>& load,
                          const SplitRun& run) {
  const absl::StatusOr<int> processes = LaunchedProcesses();
  if (!processes.ok()) return Fail(processes.status());
  if (*processes == 1) {
    const absl::StatusOr<config::JobConfig> job = load();
    if (!job.ok()) return Fail(job.status());
    const absl::StatusOr<training::TrainingPlacement> placement =
        ResolveInferencePlacement(*job, device, /*local_rank=*/0);
    if (!placement.ok()) return Fail(placement.status());
    parallel::SelfCommunicator whole("tp", 0, placement->ctx);
    return run(*job, *placement, whole);
  }
  return UnderMpi([&](int, int world_size) {
    const absl::StatusOr<config::JobConfig> job = load();
    if (!job.ok()) return Fail(job.status());
    if (const absl::Status split = CheckSplit(command, *job, world_size); !split.ok()) {
      return Fail(split);
    }
    const training::NodePlace node = training::NodePlaceOf(MPI_COMM_WORLD);
    const absl::StatusOr<training::TrainingPlacement> placement =
        ResolveInferencePlacement(*job, device, node.rank);
    if (!placement.ok()) return Fail(placement.status());
    parallel::CommBackend backend = parallel::CommBackend::kMpi;
    if (placement->ctx.is_cuda()) {
      const absl::StatusOr<parallel::CommBackend> resolved =
          training::ResolveBackend(job->parallel(), placement->ctx, node.size);
      if (!resolved.ok()) return Fail(resolved.status());
      backend = *resolved;
    }
    parallel::CommunicatorOptions options;  // a model directory's job sets no timeout: the default
    if (job->parallel().collective_timeout_seconds() > 0) {
      options.timeout_seconds = job->parallel().collective_timeout_seconds();
    }
    absl::StatusOr<std::unique_ptr<parallel::Communicator>> tp =
        parallel::CreateCommunicator(backend, MPI_COMM_WORLD, "tp", options, placement->ctx);
    if (!tp.ok()) return Fail(tp.status());
    return run(*job, *placement, **tp);
  });
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
