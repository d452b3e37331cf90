// `kelvin prepare-data SAMPLES.jsonl --out PREFIX [--tokenizer DIR]`: fine-tuning samples into a
// Megatron indexed dataset and its loss mask (data/sft/jsonl_samples.h).
#pragma once

#include "launcher/commands/command_line.h"

namespace kelvin::launcher {

void AddPrepareDataCommand(CommandLine& line);

}  // namespace kelvin::launcher
