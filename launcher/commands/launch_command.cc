// launch: every check a job would fail at its start (weights, data, outputs, devices, memory)
// made here, before the batch job is written or submitted.
#include "launcher/commands/launch_command.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launcher/commands/plan_command.h"
#include "launcher/config/job_config.h"
#include "launcher/slurm/slurm_batch.h"
#include "models/llama/hf_weight_check.h"
#include "training/job/data_sources.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {
namespace {

// The path of this kelvin binary, which the batch job runs.
std::string SelfPath() {
  std::vector<char> path(PATH_MAX + 1, '\0');
  const ssize_t n = readlink("/proc/self/exe", path.data(), PATH_MAX);
  return n > 0 ? std::string(path.data(), static_cast<size_t>(n)) : std::string("kelvin");
}

// What would fail the job when it starts on the cluster.
absl::Status CheckJobCanStart(const PlannedJob& planned) {
  const config::JobConfig& job = planned.job;
  if (!planned.stand_in_note.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model.hf_dir=", job.model().hf_dir(),
        " holds no readable config.json on this machine, so the job would fail when it starts: "
        "launch where the weights are visible (a shared filesystem), or fix model.hf_dir"));
  }
  if (job.model().has_hf_dir()) {  // the weights, opened and checked as the trainer does
    KELVIN_RETURN_IF_ERROR(WithWorkingDirectory(
        models::OpenHfWeightsFor(job.model().hf_dir(), planned.arch).status(), job));
  }
  KELVIN_RETURN_IF_ERROR(WithWorkingDirectory(training::CheckDataFilesExist(job), job));
  KELVIN_RETURN_IF_ERROR(WithWorkingDirectory(training::CheckOutputLocations(job), job));
  if (job.training().device() == config::TrainingConfig::CUDA &&
      job.launch().gpus_per_node() == 0) {
    return absl::InvalidArgumentError(
        "training.device=CUDA but launch.gpus_per_node=0: request the GPUs per node");
  }
  return PrintPlan(planned);
}

int Launch(const PlanArguments& a, bool submit) {
  const absl::StatusOr<PlannedJob> planned = PlanJob(a);
  if (!planned.ok()) return Fail(planned.status());
  if (const absl::Status can_start = CheckJobCanStart(*planned); !can_start.ok()) {
    return Fail(can_start);
  }
  const config::JobConfig& job = planned->job;
  const absl::StatusOr<BatchJob> batch = WriteBatchJob(job, SelfPath());
  if (!batch.ok()) return Fail(batch.status());
  std::printf("wrote %s (the resolved job is embedded in it)\n", batch->script_path.c_str());
  if (!submit) {
    std::printf("submit it with: sbatch %s   (or kelvin launch ... --submit)\n",
                batch->script_path.c_str());
    return 0;
  }
  const absl::StatusOr<SubmittedJob> submitted = SubmitBatchJob(batch->script_path);
  if (!submitted.ok()) return Fail(submitted.status());
  if (!submitted->other_output.empty()) {
    std::fprintf(stderr, "%s\n", submitted->other_output.c_str());  // sbatch's warnings
  }
  const std::string& id = submitted->id;
  const absl::Status recorded = RecordSubmittedJob(job, id);
  if (!recorded.ok()) {
    std::fprintf(stderr,
                 "kelvin: warning: %s (a later launch into this run directory is not "
                 "refused while job %s lives)\n",
                 std::string(recorded.message()).c_str(), id.c_str());
  }
  std::printf("submitted batch job %s; its log: %s/slurm-%s.out\n", id.c_str(),
              std::filesystem::path(batch->script_path).parent_path().c_str(), id.c_str());
  return 0;
}

}  // namespace

void AddLaunchCommand(CommandLine& line) {
  auto a = std::make_shared<PlanArguments>();
  auto submit = std::make_shared<bool>(false);
  CLI::App* command = line.AddCommand(
      "launch", "check the job, then write its SLURM batch script",
      "The layout and memory are checked on launch.nodes x launch.processes_per_node, with the\n"
      "weights, data and output locations; the script and the resolved job go into\n"
      "launch.run_dir.",
      [a, submit] { return Launch(*a, *submit); });
  AddJobArguments(line, command, a->job);
  line.AddFlag(command, "--submit", "also sbatch it", *submit);
}

}  // namespace kelvin::launcher
