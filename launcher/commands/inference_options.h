// The command-line side of the forward-only commands (generate, eval --data / --text / --needle):
// their job (a job file or a Hugging Face model directory), --device and --tokenizer.
#pragma once

#include <optional>
#include <string>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "inference/forward_model.h"
#include "launcher/commands/command_line.h"

namespace kelvin::launcher {

using inference::InferenceDevice;

// The job of a Hugging Face model directory given in place of a job file: model.hf_dir, its name.
config::JobConfig JobOfModelDirectory(const std::string& directory);

// The job of a forward-only command (`command` names it in errors, e.g. "generate"): JOB is a
// Hugging Face model directory (JobOfModelDirectory) or a job file with its --set overrides,
// validated for JobUse::kForwardOnly (a data source, optimizer.lr, training.steps, the batch and
// training.seq_length may be left out).
absl::StatusOr<config::JobConfig> LoadForwardOnlyJob(const std::string& command,
                                                     const JobArguments& job);
// The usage error's exit code when --set is given with a model directory (it changes job files).
std::optional<int> CheckNoSetOnModelDirectory(const JobArguments& job);

// --device cpu|cuda on `command`, into `device` (kJob when it is not given).
void AddDeviceOption(CommandLine& line, CLI::App* command, InferenceDevice& device);

// --tokenizer DIR on `command`: the directory of the tokenizer (tokenizer.json, with
// tokenizer_config.json and a chat template when it has them) of a model that has none of its
// own, e.g. one trained from a preset; it replaces model.hf_dir's.
void AddTokenizerOption(CommandLine& line, CLI::App* command, std::string& directory);

}  // namespace kelvin::launcher
