// `kelvin plan JOB`: the job's layout, memory per rank and (with launch.hardware) predicted step
// time without training (--layouts: every valid split of the processes, ranked; --forward-only:
// the memory of the forward-only model `kelvin eval JOB` builds on the layout). launch plans the
// same way before it writes its script.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "launcher/commands/command_line.h"
#include "models/llama/llama_config.h"
#include "training/job/job_plan.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

struct PlanArguments {
  JobArguments job;
  int processes = 0;   // --processes (0: launch.nodes x launch.processes_per_node)
  std::string device;  // --device: "", "cpu" or "cuda" ("": training.device, AUTO from launch.*)
  bool layouts = false;
  bool forward_only = false;  // --forward-only: the model `kelvin eval JOB` builds instead
};

// The job and what plan and launch work out for it: its architecture, the processes, the device
// and its layout on them.
struct PlannedJob {
  config::JobConfig job;
  models::LlamaConfig arch;
  int processes = 0;
  bool cuda = false;
  training::JobLayout layout;
  std::string stand_in_note;  // a preset stands in for unreadable model.hf_dir weights
};
absl::StatusOr<PlannedJob> PlanJob(const PlanArguments& arguments);

// Prints the job's plan and step time; an error when its largest rank does not fit
// launch.gpu_memory_gib.
absl::Status PrintPlan(const PlannedJob& planned);

void AddPlanCommand(CommandLine& line);

}  // namespace kelvin::launcher
