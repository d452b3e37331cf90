// `kelvin train JOB`: one process, or one rank each under mpirun / srun with the job's layout.
#pragma once

#include "launcher/commands/command_line.h"

namespace kelvin::launcher {

void AddTrainCommand(CommandLine& line);

}  // namespace kelvin::launcher
