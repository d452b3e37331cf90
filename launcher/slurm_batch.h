// `kelvin launch`: a job as a SLURM batch job. The script allocates launch.nodes x
// processes_per_node tasks (GPUs, time limit, partition, preemption signal, requeue from launch.*)
// and starts one kelvin rank per task with srun on the resolved job config written beside it, so
// the job trains exactly what was validated at submission.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"

namespace kelvin::launcher {

// The batch script of `job` (defaults resolved, validated): `kelvin_binary` and `config_path`
// (absolute) are what srun runs, `log_path` the SLURM output pattern.
std::string SbatchScript(const config::JobConfig& job, const std::string& kelvin_binary,
                         const std::string& config_path, const std::string& log_path);

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
