// Semantic checks of a JobConfig: every rule knowable from the job file alone (ranges,
// divisibility, settings that need one another). Layout checks that need the world size or the
// resolved model (tensor parallel divides heads, world = product of the sizes) come later, in the
// launcher.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "configs/kelvin.pb.h"

namespace kelvin::launcher {

// What the job is loaded for. A forward-only command (generate, eval --data / --text / --needle,
// convert) runs the model and reads no training data: a job for it may leave unset exactly the
// fields that only training requires (a data source, optimizer.lr, training.steps,
// training.global_batch_size, training.seq_length); a value it does give is checked as in training.
enum class JobUse { kTraining, kForwardOnly };

// Checks the job after ResolveDefaults (applied here to a copy, so a raw job is judged by its
// effective values). Reports every problem at once: InvalidArgument whose message is
// "invalid job config: <problem>" or "invalid job config (N problems):" followed by one
// "  <problem>" line each, a problem reading like "training.micro_batch_size=0: must be >= 1".
absl::Status ValidateJobConfig(const config::JobConfig& config, JobUse use = JobUse::kTraining);

}  // namespace kelvin::launcher
