// plan: one layout's plan, or (--layouts) the search over every split of the processes.
#include "launcher/commands/plan_command.h"

#include <climits>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "launcher/config/job_config.h"
#include "launcher/plan/layout_search.h"
#include "launcher/plan/step_time.h"

namespace kelvin::launcher {
namespace {

// Whether the job plans for CUDA: --device, else training.device, else (AUTO) whether launch.*
// asks for GPUs.
bool PlansForCuda(const config::JobConfig& job, const std::string& device_flag) {
  if (!device_flag.empty()) return device_flag == "cuda";
  const config::TrainingConfig::Device device = job.training().device();
  if (device != config::TrainingConfig::AUTO) return device == config::TrainingConfig::CUDA;
  return job.launch().gpus_per_node() > 0;
}

// The job, its architecture, processes and device; not yet its layout.
absl::StatusOr<PlannedJob> LoadJobToPlan(const PlanArguments& a) {
  PlannedJob planned;
  KELVIN_ASSIGN_OR_RETURN(planned.job, LoadJobConfig(a.job.path, a.job.overrides));
  KELVIN_ASSIGN_OR_RETURN(planned.arch, training::ResolveArchitectureToPlan(planned.job.model(),
                                                                            planned.stand_in_note));
  if (!planned.stand_in_note.empty()) {
    std::fprintf(stderr, "kelvin: note: %s\n", planned.stand_in_note.c_str());
  }
  const config::LaunchConfig& launch = planned.job.launch();
  const int64_t launched = int64_t{launch.nodes()} * launch.processes_per_node();
  if (a.processes == 0 && launched > INT_MAX) {
    return absl::InvalidArgumentError("launch.nodes x launch.processes_per_node is too large");
  }
  planned.processes = a.processes > 0 ? a.processes : static_cast<int>(launched);
  planned.cuda = PlansForCuda(planned.job, a.device);
  return planned;
}

// plan --layouts: the job's valid layouts on the planned processes, best first; an error when
// none fits launch.gpu_memory_gib.
absl::Status PrintLayouts(const PlanArguments& a) {
  KELVIN_ASSIGN_OR_RETURN(const PlannedJob loaded, LoadJobToPlan(a));
  const config::JobConfig& job = loaded.job;
  const int processes = loaded.processes;
  KELVIN_ASSIGN_OR_RETURN(const LayoutSearch search,
                          SearchLayouts(job, loaded.arch, processes, loaded.cuda));
  std::printf("%s", FormatLayoutSearch(job, search, processes, 15).c_str());
  std::fflush(stdout);
  if (search.candidates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no split of ", processes, " processes is valid for this job (", search.invalid,
        " tried; e.g. ", search.invalid_reasons.front(),
        "): plan for another count (--processes N) or change training.global_batch_size"));
  }
  if (search.candidates.front().fits) return absl::OkStatus();
  std::vector<std::string> remedies = training::ActivationMemoryRemedies(job);
  remedies.push_back("plan for more processes (--processes N)");
  return absl::ResourceExhaustedError(
      absl::StrCat("no layout of ", processes, " processes fits launch.gpu_memory_gib=",
                   job.launch().gpu_memory_gib(), ": ", absl::StrJoin(remedies, ", or ")));
}

// plan --forward-only: the forward-only model of the job's layout; an error when its largest rank
// does not fit launch.gpu_memory_gib.
absl::Status PrintForwardPlan(const PlannedJob& planned) {
  const training::JobLayout layout = training::ForwardOnlyLayout(planned.layout);
  KELVIN_ASSIGN_OR_RETURN(const std::string report,
                          training::FormatForwardPlan(planned.job, planned.arch, layout));
  std::printf("%s", report.c_str());
  std::fflush(stdout);  // before a fit error on stderr
  KELVIN_ASSIGN_OR_RETURN(const training::PeakMemory peak,
                          training::PlanPeakMemory(planned.job, planned.arch, layout));
  return training::CheckPlanFitsGpu(planned.job, layout, peak);
}

int Plan(const PlanArguments& a) {
  if (a.layouts && a.forward_only) {
    return Fail(absl::InvalidArgumentError(
        "plan: --layouts ranks the layouts for training and --forward-only plans one layout's "
        "forward-only model: give one of them"));
  }
  if (a.layouts) {
    const absl::Status printed = PrintLayouts(a);
    return printed.ok() ? 0 : Fail(printed);
  }
  const absl::StatusOr<PlannedJob> planned = PlanJob(a);
  if (!planned.ok()) return Fail(planned.status());
  const absl::Status printed = a.forward_only ? PrintForwardPlan(*planned) : PrintPlan(*planned);
  return printed.ok() ? 0 : Fail(printed);
}

}  // namespace

absl::StatusOr<PlannedJob> PlanJob(const PlanArguments& arguments) {
  KELVIN_ASSIGN_OR_RETURN(PlannedJob planned, LoadJobToPlan(arguments));
  KELVIN_ASSIGN_OR_RETURN(planned.layout, training::PlanJobLayout(planned.job, planned.arch,
                                                                  planned.processes, planned.cuda));
  return planned;
}

absl::Status PrintPlan(const PlannedJob& planned) {
  KELVIN_ASSIGN_OR_RETURN(const std::string report,
                          training::FormatJobPlan(planned.job, planned.arch, planned.layout));
  const StepTime step = PredictStepTime(planned.job, planned.arch, planned.layout, planned.cuda);
  std::printf("%s%s", report.c_str(), FormatStepTime(planned.job, planned.layout, step).c_str());
  std::fflush(stdout);  // before a fit error on stderr
  KELVIN_ASSIGN_OR_RETURN(const training::PeakMemory peak,
                          training::PlanPeakMemory(planned.job, planned.arch, planned.layout));
  return training::CheckPlanFitsGpu(planned.job, planned.layout, peak);
}

void AddPlanCommand(CommandLine& line) {
  auto a = std::make_shared<PlanArguments>();
  CLI::App* command = line.AddCommand(
      "plan", "print the job's layout and memory per rank, without training",
      "With launch.hardware it predicts the step time.\n"
      "--layouts lists every valid tensor x context x pipeline x data split of the processes\n"
      "with its largest rank's memory (and predicted step): those fitting\n"
      "launch.gpu_memory_gib first, then the fastest, then the least model parallelism; and the\n"
      "--set flags of the best.\n"
      "--forward-only plans the model kelvin eval JOB builds on the layout instead: its weights\n"
      "and one micro-batch's activations per rank.",
      [a] { return Plan(*a); });
  AddJobArguments(line, command, a->job);
  line.AddValue(command, "--processes", "N", "a process count >= 1",
                "the world size (default: launch.nodes x processes_per_node)",
                [a](const std::string& text) {
                  return ParseInteger(text, 1, "a process count >= 1", a->processes);
                });
  line.AddValue(command, "--device", "cpu|cuda", "cpu or cuda",
                "default: training.device (AUTO: cuda with launch.gpus_per_node)",
                [a](const std::string& text) {
                  bool cuda = false;
                  const std::string error = ParseDevice(text, cuda);
                  if (error.empty()) a->device = cuda ? "cuda" : "cpu";
                  return error;
                });
  line.AddFlag(command, "--layouts", "instead: every valid layout of the processes, ranked",
               a->layouts);
  line.AddFlag(command, "--forward-only",
               "instead: the memory of the forward-only model kelvin eval JOB builds",
               a->forward_only);
}

}  // namespace kelvin::launcher
