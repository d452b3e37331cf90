// The run directory's files (see run_directory.h), each written atomically.
#include "training/run_directory.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/io/atomic_file.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

std::string InRunDirectory(const config::JobConfig& job, const char* name) {
  return (fs::path(RunDirectoryOf(job)) / name).string();
}

}  // namespace

std::string RunDirectoryOf(const config::JobConfig& job) {
  return job.launch().run_dir().empty() ? "runs/" + job.name() : job.launch().run_dir();
}

absl::StatusOr<std::string> StartRunDirectory(const config::JobConfig& job,
                                              const std::string& resolved_text) {
  std::error_code error;
  fs::create_directories(RunDirectoryOf(job), error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("launch.run_dir=\"", RunDirectoryOf(job),
                                                    "\": cannot create it: ", error.message()));
  }
  for (const char* marker : {kStoppedForPreemptionFile, kFinishedFile}) {
    fs::remove(InRunDirectory(job, marker), error);
  }
  const std::string path = InRunDirectory(job, kResolvedConfigFile);
  const absl::Status written =
      io::WriteFileAtomically(path, {absl::StrCat("# ", job.name(),
                                                  ": the job config as `kelvin train` resolved it "
                                                  "(defaults and overrides applied)\n"),
                                     resolved_text});
  if (!written.ok()) return written;
  return path;
}

absl::Status MarkStoppedForPreemption(const config::JobConfig& job, int64_t steps_completed,
                                      int signal) {
  std::error_code error;
  if (!fs::is_directory(RunDirectoryOf(job), error)) return absl::OkStatus();
  return io::WriteFileAtomically(
      InRunDirectory(job, kStoppedForPreemptionFile),
      {absl::StrCat("stopped after step ", steps_completed, " by signal ", signal, "\n")});
}

absl::Status MarkFinished(const config::JobConfig& job, int64_t steps_completed) {
  std::error_code error;
  if (!fs::is_directory(RunDirectoryOf(job), error)) return absl::OkStatus();
  return io::WriteFileAtomically(InRunDirectory(job, kFinishedFile),
                                 {absl::StrCat("finished ", steps_completed, " steps\n")});
}

}  // namespace kelvin::training
