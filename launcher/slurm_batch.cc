// The batch script, its files, and sbatch.
#include "launcher/slurm_batch.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "launcher/checkpoint.h"
#include "launcher/job_config.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;

// `text` as one shell word.
std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// sbatch reads #SBATCH values up to whitespace: paths there must have none.
bool HasSpace(const std::string& text) {
  for (const char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return true;
  }
  return false;
}

absl::Status WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace

std::string SbatchScript(const config::JobConfig& job, const BatchPaths& paths) {
  const config::LaunchConfig& l = job.launch();
  std::string s = absl::StrCat("#!/bin/bash\n# Kelvin job ", job.name(),
                               ", written by `kelvin launch`; submit it with sbatch.\n# It trains ",
                               paths.config_path, "\n");
  const auto directive = [&s](const std::string& option) {
    absl::StrAppend(&s, "#SBATCH ", option, "\n");
  };
  directive("--job-name=" + job.name());
  directive(absl::StrCat("--nodes=", l.nodes()));
  directive(absl::StrCat("--ntasks-per-node=", l.processes_per_node()));
  if (l.gpus_per_node() > 0) directive(absl::StrCat("--gpus-per-node=", l.gpus_per_node()));
  if (l.cpus_per_process() > 0) directive(absl::StrCat("--cpus-per-task=", l.cpus_per_process()));
  if (!l.time_limit().empty()) directive("--time=" + l.time_limit());
  if (!l.partition().empty()) directive("--partition=" + l.partition());
  if (!l.account().empty()) directive("--account=" + l.account());
  if (!l.qos().empty()) directive("--qos=" + l.qos());
  // Without "B:" SLURM signals the job steps: the training processes save and stop.
  if (l.preemption_warning_seconds() > 0) {
    directive(absl::StrCat("--signal=USR1@", l.preemption_warning_seconds()));
  }
  if (l.requeue()) directive("--requeue");
  directive("--open-mode=append");  // a requeued job continues the same log
  directive("--output=" + paths.log_path);
  directive("--chdir=" + paths.working_dir);  // relative paths of the job as at launch
  for (const std::string& option : l.extra_sbatch_options()) directive(option);
  absl::StrAppend(&s, "set -euo pipefail\n");
  for (const std::string& line : l.setup_commands()) absl::StrAppend(&s, line, "\n");
  if (l.cpus_per_process() > 0 && job.training().threads() == 0) {
    absl::StrAppend(&s, "export OMP_NUM_THREADS=", l.cpus_per_process(), "\n");
  }
  // pmix: Debian's OpenMPI starts under srun only with it; a rank that fails ends every other
  // one at once.
  const std::string train =
      absl::StrCat("srun --mpi=pmix --kill-on-bad-exit=1 ", ShellQuote(paths.kelvin_binary),
                   " train ", ShellQuote(paths.config_path));
  absl::StrAppend(&s,
                  "echo \"kelvin: SLURM job $SLURM_JOB_ID, $SLURM_NNODES node(s), "
                  "restart ${SLURM_RESTART_COUNT:-0}\"\n");
  if (!l.requeue()) {
    absl::StrAppend(&s, train, "\n");
    return s;
  }
  // A run that saved a checkpoint and stopped on a signal (the time-limit warning, or a
  // preemption SLURM requeues by itself) leaves a marker in checkpoint.dir: the job goes back in
  // the queue and resumes. The marker, not srun's exit code, decides: with --kill-on-bad-exit the
  // ranks still exiting may be killed and srun report 137. Each run completes at least one step
  // before it looks for a signal, so this cannot loop idle.
  const std::string marker =
      ShellQuote((fs::path(job.checkpoint().dir()) / kStoppedForPreemptionFile).string());
  absl::StrAppend(&s, "marker=", marker, "\n", "rm -f \"$marker\"\n", "status=0\n", train,
                  " || status=$?\n", "if [ -e \"$marker\" ]; then\n",
                  "  echo \"kelvin: $(cat \"$marker\"), checkpoint saved; requeueing job "
                  "$SLURM_JOB_ID to continue\"\n",
                  "  scontrol requeue \"$SLURM_JOB_ID\"\n", "fi\n", "exit \"$status\"\n");
  return s;
}

absl::StatusOr<BatchJob> WriteBatchJob(const config::JobConfig& job,
                                       const std::string& kelvin_binary) {
  std::error_code error;
  const fs::path dir = fs::absolute(job.launch().run_dir(), error);
  const fs::path working_dir = fs::current_path(error);
  if (error || HasSpace(dir.string()) || HasSpace(working_dir.string())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launch.run_dir=\"", job.launch().run_dir(), "\" from ", working_dir.string(),
        ": use directories without spaces (they go into #SBATCH --output and --chdir)"));
  }
  fs::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("launch.run_dir: cannot create ", dir.string(), ": ", error.message()));
  }
  const BatchJob batch{(dir / (job.name() + ".sbatch")).string(),
                       (dir / (job.name() + ".resolved.textproto")).string()};
  KELVIN_RETURN_IF_ERROR(WriteFile(
      batch.config_path,
      absl::StrCat("# ", job.name(), ": the job config as `kelvin launch` ",
                   "resolved it (defaults and overrides applied)\n", FormatResolvedConfig(job))));
  const BatchPaths paths{kelvin_binary, batch.config_path, (dir / "slurm-%j.out").string(),
                         working_dir.string()};
  KELVIN_RETURN_IF_ERROR(WriteFile(batch.script_path, SbatchScript(job, paths)));
  return batch;
}

absl::StatusOr<std::string> SubmitBatchJob(const std::string& script_path) {
  const std::string command = "sbatch --parsable " + ShellQuote(script_path) + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("cannot start sbatch: popen failed");
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  const std::string message(absl::StripAsciiWhitespace(output));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sbatch was not found on PATH: run kelvin launch --submit on a SLURM login node, or "
        "submit the written script there: sbatch ",
        script_path));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sbatch ", script_path, " failed: ", message));
  }
  // --parsable prints "<job id>" or "<job id>;<cluster>".
  return std::string(message.substr(0, message.find(';')));
}

}  // namespace kelvin::launcher
