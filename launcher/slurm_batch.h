// `kelvin launch`: a job as a SLURM batch job. The script allocates launch.nodes x
// processes_per_node tasks (GPUs, time limit, partition, preemption signal, requeue from launch.*)
// and starts one kelvin rank per task with srun on the resolved job config written beside it, so
// the job trains exactly what was validated at submission.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"

namespace kelvin::launcher {

// Where a batch job runs: what srun starts, where SLURM writes its output, and the working
// directory the job's relative paths (data, checkpoints, exports) mean: absolute paths.
struct BatchPaths {
  std::string kelvin_binary;
  std::string config_path;  // the resolved job config
  std::string log_path;     // SLURM's output pattern (%j: the job id)
  std::string working_dir;  // where `kelvin launch` ran
};
// The batch script of `job` (defaults resolved, validated).
std::string SbatchScript(const config::JobConfig& job, const BatchPaths& paths);

struct BatchJob {
  std::string script_path;  // <run dir>/<name>.sbatch
  std::string config_path;  // <run dir>/<name>.resolved.textproto
};
// Writes the resolved job config and its batch script into launch.run_dir (created; relative to
// the working directory). Errors name the directory or the path that cannot be used.
absl::StatusOr<BatchJob> WriteBatchJob(const config::JobConfig& job,
                                       const std::string& kelvin_binary);

// `sbatch --parsable script_path`: the job id. Errors: no sbatch on PATH (not a SLURM login node),
// or sbatch's own message.
absl::StatusOr<std::string> SubmitBatchJob(const std::string& script_path);

}  // namespace kelvin::launcher
