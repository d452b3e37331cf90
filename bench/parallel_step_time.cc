// Step time of the trainer under one parallel layout (run it under mpirun; bench/
// parallel_cpu_step.sh compares layouts, on the passkey demo job): a job with the layout and shape
// set by config overrides, one warm-up step, then timed steps; rank 0 prints one JSON line.
// Usage: mpirun -np N parallel_step_time CONFIG TIMED_STEPS [--set field=value ...]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/config/job_config.h"
#include "training/trainer.h"

namespace kelvin {
namespace {

double MeanOverRanks(double value, int size) {
  double sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / size;
}

double MaxOverRanks(double value) {
  double max = 0;
  MPI_Allreduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max;
}

// The JSON line: the median step seconds (the slowest rank's), and over the ranks the mean share of
// the step spent in communication calls and, under pipeline parallelism, the mean share of the
// forward/backward phase spent in pipeline transfers (waiting for the neighbouring stages: the
// bubble, measured).
int Run(const std::string& config_path, int timed_steps, const std::vector<std::string>& sets) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(config_path, sets);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<training::Trainer>> trainer = training::Trainer::Create(*job);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(trainer.status().message()).c_str());
    return 2;
  }
  std::vector<double> seconds;
  double communication = 0, transfers = 0, micro_batches = 0, total = 0;
  for (int step = 0; step <= timed_steps; ++step) {
    absl::StatusOr<training::StepStats> stats = (*trainer)->TrainStep(step);
    if (!stats.ok()) {
      std::fprintf(stderr, "%s\n", std::string(stats.status().message()).c_str());
      return 1;
    }
    if (step == 0) continue;  // warm-up: allocations, OpenBLAS buffers
    seconds.push_back(MaxOverRanks(stats->seconds));
    communication += stats->communication_seconds;
    transfers += stats->pipeline_transfer_seconds;
    micro_batches += stats->micro_batch_seconds;
    total += stats->seconds;
  }
  std::sort(seconds.begin(), seconds.end());
  const double communication_share = MeanOverRanks(communication / total, size);
  const double bubble = MeanOverRanks(transfers / micro_batches, size);
  if (rank == 0) {
    std::printf(
        "{\"ranks\": %d, \"step_seconds\": %.4f, \"communication_share\": %.4f, "
        "\"pipeline_transfer_share\": %.4f}\n",
        size, seconds[seconds.size() / 2], communication_share, bubble);
  }
  return 0;
}

}  // namespace
}  // namespace kelvin

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG TIMED_STEPS [--set field=value ...]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  std::vector<std::string> sets;
  for (int i = 3; i + 1 < argc; i += 2) sets.push_back(argv[i + 1]);
  const int rc = kelvin::Run(argv[1], std::atoi(argv[2]), sets);
  MPI_Finalize();
  return rc;
}
