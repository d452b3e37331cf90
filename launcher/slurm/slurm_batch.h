// `kelvin launch`: a job as a SLURM batch job, one kelvin rank per task under srun on the resolved
// job embedded in the script (SLURM keeps each submitted script, so every requeue trains what was
// validated at submission); a launch into the directories of a live job is refused.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "configs/kelvin.pb.h"

namespace kelvin::launcher {

// Where a batch job runs (absolute paths): what srun starts, the run directory (the job config it
// writes at start, the markers train leaves, SLURM's output), and the working directory the
// job's relative paths (data, checkpoints, exports) mean.
struct BatchPaths {
  std::string kelvin_binary;
  std::string run_dir;
  std::string working_dir;  // where `kelvin launch` ran
};
// The script allocates launch.nodes x processes_per_node tasks with the GPUs, time limit,
// partition, preemption signal and requeue of launch.*.
// The batch script of `job` (defaults resolved, validated).
std::string SbatchScript(const config::JobConfig& job, const BatchPaths& paths);

struct BatchJob {
  std::string script_path;  // <run dir>/<name>.sbatch
  std::string kelvin_copy;  // <run dir>/kKelvinCopy, what the script runs
};
inline constexpr const char* kKelvinCopy = "kelvin";
// Writes the batch script into launch.run_dir (created; relative to the working directory), with
// a copy of `kelvin_binary` (this kelvin) that the script runs. Errors name the directory or the
// path that cannot be used, and a live SLURM job (pending, running, requeued) already using
// launch.run_dir or checkpoint.dir (LiveJobsUsing).
absl::StatusOr<BatchJob> WriteBatchJob(const config::JobConfig& job,
                                       const std::string& kelvin_binary);

// What sbatch answered: the job id, and the lines it printed besides (its warnings).
struct SubmittedJob {
  std::string id;
  std::string other_output;
};
// `sbatch --parsable script_path`. Errors: no sbatch on PATH (not a SLURM login node), sbatch's own
// message, or an answer whose last line is not a job id ("N" or "N;cluster", as --parsable
// prints, or sbatch's "Submitted batch job N"), quoted whole.
absl::StatusOr<SubmittedJob> SubmitBatchJob(const std::string& script_path);
// The job id in one line of sbatch's answer, or nullopt.
std::optional<std::string> SbatchJobId(absl::string_view line);

// Records a submitted job in the run and checkpoint directories (file kSlurmJobsFile, one id per
// line), which the batch script also does when it starts (a script submitted by hand).
absl::Status RecordSubmittedJob(const config::JobConfig& job, const std::string& job_id);
inline constexpr const char* kSlurmJobsFile = "slurm_jobs";

// The jobs recorded in the job's run and checkpoint directories that SLURM still knows as live
// (squeue), as "<id> (<state>)"; empty where squeue is not on PATH.
std::vector<std::string> LiveJobsUsing(const config::JobConfig& job);

}  // namespace kelvin::launcher
