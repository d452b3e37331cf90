// train: the output locations checked, the trainer built, the resolved job written to the run
// directory once the trainer accepted it (a refused job leaves nothing), then the run.
#include "launcher/commands/train_command.h"

#include <memory>

#include "core/build_info.h"
#include "core/logging.h"
#include "launcher/commands/process_launch.h"
#include "launcher/config/job_config.h"
#include "training/checkpoint/preemption.h"
#include "training/job/job_setup.h"
#include "training/run_directory.h"
#include "training/trainer.h"

namespace kelvin::launcher {
namespace {

// World rank 0 writes the whole resolved job to the run directory (not to the log); where it
// cannot, the log gets it.
void RecordResolvedJob(const config::JobConfig& job) {
  const std::string resolved = FormatResolvedConfig(job);
  const absl::StatusOr<std::string> written = training::StartRunDirectory(job, resolved);
  if (written.ok()) {
    KLOG(INFO) << "job " << job.name() << ": its resolved config is " << *written;
  } else {
    KLOG(WARNING) << "job " << job.name() << ": " << written.status()
                  << "; its resolved config follows:\n"
                  << resolved;
  }
}

int Train(const config::JobConfig& job, int world_rank) {
  // Without checkpoints a stop signal cannot be honoured: it ends the run, as by default.
  if (job.checkpoint().dir().empty()) training::UninstallPreemptionHandlers();
  KLOG_RANK0(INFO) << "kelvin " << KelvinVersion() << "; " << LibraryVersions();
  // Before the run directory is written (every rank finds the same: none waits for another).
  if (const absl::Status outputs = training::CheckOutputLocations(job); !outputs.ok()) {
    return Fail(WithWorkingDirectory(outputs, job));
  }
  absl::StatusOr<std::unique_ptr<training::Trainer>> trainer = training::Trainer::Create(job);
  if (!trainer.ok()) return Fail(WithWorkingDirectory(trainer.status(), job));
  if (world_rank == 0) RecordResolvedJob(job);
  const absl::Status status = (*trainer)->Run();
  return status.ok() ? 0 : Fail(WithWorkingDirectory(status, job));
}

}  // namespace

void AddTrainCommand(CommandLine& line) {
  auto job = std::make_shared<JobArguments>();
  CLI::App* command = line.AddCommand(
      "train", "train the job: one process, or one rank under mpirun / srun", "", [job] {
        // Before anything slow: a preemption warning during start-up is kept for the loop.
        training::InstallPreemptionHandlers();
        return RunOnEveryRank(*job, Train);
      });
  AddJobArguments(line, command, *job);
}

}  // namespace kelvin::launcher
