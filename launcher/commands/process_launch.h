// How the commands run under a launcher: on every rank with MPI (train, eval), split over the ranks
// by tensor parallelism (generate, eval --data / --text / --needle), or as one process that only
// rank 0 of an mpirun / srun job carries out (convert).
#pragma once

#include <functional>

#include "configs/kelvin.pb.h"
#include "launcher/commands/command_line.h"
#include "launcher/commands/inference_options.h"
#include "parallel/comm/communicator.h"

namespace kelvin::launcher {

// Initialises MPI (whether or not a launcher started several processes), checks the launcher's
// variables against MPI's world, loads the job and runs `run` on it with this process's world
// rank; a failure every rank meets alike (a preemption stop, a bad job file) is printed once and
// ends every process with its exit code, one rank's alone aborts the others (rank_failures.h).
int RunOnEveryRank(const JobArguments& job,
                   const std::function<int(const config::JobConfig& job, int world_rank)>& run);

// `run` on the launcher's rank 0; the other ranks exit at once with 0.
int RunOnRankZero(const std::function<int()>& run);

// How many processes the launcher (mpirun, srun) started: 1 without one.
absl::StatusOr<int> LaunchedProcesses();

// A forward-only command (generate, eval --data / --text / --needle) on the processes the launcher
// started, the model split over all of them by tensor parallelism (checked against the model: an
// error naming the split and `command`): each rank runs `run`(job, where its part of the model runs
// (ResolveInferencePlacement on `device`: on CUDA a GPU per rank as in training), the group: one
// process's own, else the world's, on that device: NCCL where every process of a node has a GPU of
// its own, else MPI, as parallel.communication_backend AUTO gives in training). `load` gives the
// job (a job file or a model directory).
using SplitRun =
    std::function<int(const config::JobConfig& job, const training::TrainingPlacement& placement,
                      parallel::Communicator& tp)>;
int RunSplitOverProcesses(const std::string& command, InferenceDevice device,
                          const std::function<absl::StatusOr<config::JobConfig>()>& load,
                          const SplitRun& run);

}  // namespace kelvin::launcher
