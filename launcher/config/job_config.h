// Job configs: reading a text-format JobConfig (configs/kelvin.proto), command-line overrides
// ("optimizer.lr=1e-5"), default resolution and the resolved job as text for the start-of-job log.
// Every user mistake comes back as one absl::Status naming the file, line, field and value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "launcher/config/job_config_validation.h"

namespace kelvin::launcher {

// The whole path from a job file to a job ready to run: reads `path`, parses it, applies
// `overrides` in order, fills the job name from the file name when empty, resolves defaults and
// validates it for `use` (JobUse). Errors name `path`.
absl::StatusOr<config::JobConfig> LoadJobConfig(const std::string& path,
                                                const std::vector<std::string>& overrides = {},
                                                JobUse use = JobUse::kTraining);

// As LoadJobConfig, for text already in memory (tests, embedded default jobs); `source_name`
// stands for the file in messages and gives the default job name.
absl::StatusOr<config::JobConfig> ParseJobConfig(std::string_view text,
                                                 std::string_view source_name,
                                                 const std::vector<std::string>& overrides = {},
                                                 JobUse use = JobUse::kTraining);

// Syntax only: text format to JobConfig, no overrides, defaults or validation. Errors read
// "<source_name>:<line>:<column>: <protobuf's message>", with a did-you-mean for unknown field
// names and the valid names for unknown enum values.
absl::StatusOr<config::JobConfig> ParseJobConfigText(std::string_view text,
                                                     std::string_view source_name);

// Applies one "dotted.field.path=value" assignment. The value is in text-format syntax (numbers,
// true/false, enum names, quoted strings); a string field also takes the bare text. The path must
// end at a singular scalar field; setting a member of a oneof selects that member. Errors name the
// override, the bad path component and the valid fields at that level.
absl::Status ApplyOverride(std::string_view assignment, config::JobConfig& config);

// Makes every default of configs/kelvin.proto explicit (idempotent). Values that need the world
// size or the machine stay as written: training.device AUTO, parallel.data_parallel 0, and what
// derives from them (model.precision AUTO under device AUTO, gradient_accumulation_steps 0 under
// data_parallel 0). Architecture overrides stay unset: they default to the model source.
void ResolveDefaults(config::JobConfig& config);

// The job in text format with every field that has a value, zeros and false included (unset
// oneof members and unset optional messages are left out). Parses back to the same JobConfig.
std::string FormatResolvedConfig(const config::JobConfig& config);

// The job's paths (directories, files, dataset prefixes) that are relative, as written.
std::vector<std::string> RelativePathsOf(const config::JobConfig& job);
// `status` with "(relative paths are resolved against the working directory W)" appended when its
// message names one of the job's relative paths; OK stays OK.
absl::Status WithWorkingDirectory(const absl::Status& status, const config::JobConfig& job);
// The same for `paths` given on the command line (the relative ones among them).
absl::Status WithWorkingDirectory(const absl::Status& status,
                                  const std::vector<std::string>& paths);

}  // namespace kelvin::launcher
