// `kelvin generate`: its options on the command line, parsed into inference::GenerateOptions and
// the chat mode's, then the generation of inference/text_generation.h or
// inference/chat_generation.h on the processes a launcher started.
#pragma once

#include "launcher/commands/command_line.h"

namespace kelvin::launcher {

void AddGenerateCommand(CommandLine& line);

}  // namespace kelvin::launcher
