// The run directory (launch.run_dir, default runs/<name>): what a run leaves there for its user
// and for its batch script. `kelvin train` writes the resolved job it runs, and on world rank 0 a
// marker when it stops for a preemption signal or finishes; the batch script reads the markers
// (not srun's exit code, which is 0 even when a task failed to start).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"

namespace kelvin::training {

// Marker files in the run directory. STOPPED_FOR_PREEMPTION: "stopped after step N by signal S",
// the checkpoint of step N saved. FINISHED: "finished N steps", training complete.
inline constexpr const char* kStoppedForPreemptionFile = "STOPPED_FOR_PREEMPTION";
inline constexpr const char* kFinishedFile = "FINISHED";
// The resolved job config of the latest run started (`kelvin train`).
inline constexpr const char* kResolvedConfigFile = "resolved_config.textproto";

// The job's run directory (launch.run_dir, resolved by the job's defaults).
std::string RunDirectoryOf(const config::JobConfig& job);

// Creates the run directory and writes the resolved job into it; the markers of an earlier run
// are removed. Returns the path of the written config.
absl::StatusOr<std::string> StartRunDirectory(const config::JobConfig& job,
                                              const std::string& resolved_text);

// The markers, written where the run directory exists (StartRunDirectory made it: a Trainer run
// by a program other than `kelvin train` leaves none).
absl::Status MarkStoppedForPreemption(const config::JobConfig& job, int64_t steps_completed,
                                      int signal);
absl::Status MarkFinished(const config::JobConfig& job, int64_t steps_completed);

}  // namespace kelvin::training
