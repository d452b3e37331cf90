// `kelvin launch JOB [--submit]`: the layout checked on launch.nodes x processes_per_node, then
// the SLURM batch script and the resolved job written into launch.run_dir (and sbatch'ed).
#pragma once

#include "launcher/commands/command_line.h"

namespace kelvin::launcher {

void AddLaunchCommand(CommandLine& line);

}  // namespace kelvin::launcher
