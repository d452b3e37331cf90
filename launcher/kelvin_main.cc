// The `kelvin` command: train, plan, launch, eval, convert, generate and prepare-data, each in
// launcher/commands/. A user error ends as one message on stderr and exit code 1 (2 for the
// command line, 3 for a run stopped by a preemption signal after its checkpoint).
#include <csignal>
#include <cstdio>
#include <string>

#include "core/build_info.h"
#include "core/io/atomic_file.h"
#include "launcher/commands/command_line.h"
#include "launcher/commands/convert_command.h"
#include "launcher/commands/eval_command.h"
#include "launcher/commands/generate_command.h"
#include "launcher/commands/launch_command.h"
#include "launcher/commands/plan_command.h"
#include "launcher/commands/prepare_data_command.h"
#include "launcher/commands/train_command.h"

int main(int argc, char** argv) {
  kelvin::io::InstallTemporaryFileCleanup();  // first: no temporary outlives a Ctrl-C
  // A closed stdout pipe (`kelvin train ... | head`, a dropped ssh) fails writes to it instead of
  // killing a run before its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("kelvin %s\n%s\n", kelvin::KelvinVersion().c_str(),
                kelvin::LibraryVersions().c_str());
    return 0;
  }
  kelvin::launcher::CommandLine line;
  kelvin::launcher::AddTrainCommand(line);
  kelvin::launcher::AddPlanCommand(line);
  kelvin::launcher::AddLaunchCommand(line);
  kelvin::launcher::AddEvalCommand(line);
  kelvin::launcher::AddConvertCommand(line);
  kelvin::launcher::AddGenerateCommand(line);
  kelvin::launcher::AddPrepareDataCommand(line);
  return line.Run(argc, argv);
}
