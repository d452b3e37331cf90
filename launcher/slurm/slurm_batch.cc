// The batch script, its file, sbatch, and the record of the jobs that use a run directory.
#include "launcher/slurm/slurm_batch.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "core/io/atomic_file.h"
#include "core/status.h"
#include "launcher/config/job_config.h"
#include "training/run_directory.h"

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

// sbatch reads #SBATCH values up to whitespace, and the script must stay one line per line:
// paths in it have no whitespace, quotes or control characters. Nor backslashes: one anywhere in
// an --output path turns off sbatch's replacements (the log would be named "slurm-%j.out") and
// is dropped from the name.
bool UnsafeInScript(const std::string& text) {
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isspace(u) || absl::ascii_iscntrl(u) || c == '\'' || c == '"' || c == '\\') {
      return true;
    }
  }
  return false;
}

// `path` as an sbatch filename pattern that means the path itself: each '%' (which would start a
// replacement such as %j or %x) written as "%%", sbatch's literal percent sign.
std::string LiteralFilenamePattern(const std::string& path) {
  return absl::StrReplaceAll(path, {{"%", "%%"}});
}

// The heredoc delimiter of the embedded job: a line the text does not hold.
std::string HeredocDelimiter(const std::string& text) {
  std::string delimiter = "KELVIN_JOB_CONFIG";
  while (absl::StrContains(absl::StrCat("\n", text), absl::StrCat("\n", delimiter, "\n"))) {
    delimiter += "_";
  }
  return delimiter;
}

// The output of `command` (sh), or "" when it cannot run.
std::string OutputOf(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  pclose(pipe);
  return std::string(absl::StripAsciiWhitespace(output));
}

// Copies the executable `from` to `to` (atomically, mode 0755), one MiB at a time.
absl::Status CopyExecutable(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the kelvin binary ", from, " to copy it into the run directory"));
  }
  KELVIN_ASSIGN_OR_RETURN(io::AtomicFile out, io::AtomicFile::Create(to));
  std::string chunk(size_t{1} << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    KELVIN_RETURN_IF_ERROR(out.Write(std::string_view(chunk.data(), in.gcount())));
  }
  if (!in.eof()) return absl::DataLossError(absl::StrCat("cannot read the kelvin binary ", from));
  KELVIN_RETURN_IF_ERROR(out.Finish());
  if (::chmod(out.temporary().c_str(), 0755) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot make ", out.temporary(), " executable: ", std::strerror(errno)));
  }
  return out.Commit();
}

// The directories whose kSlurmJobsFile lists the jobs using them: the run directory, and
// checkpoint.dir when set (absolute, from the working directory).
std::vector<fs::path> RegistryDirectories(const config::JobConfig& job) {
  std::error_code error;
  std::vector<fs::path> dirs = {fs::absolute(job.launch().run_dir(), error)};
  if (!job.checkpoint().dir().empty()) dirs.push_back(fs::absolute(job.checkpoint().dir(), error));
  return dirs;
}

}  // namespace

std::string SbatchScript(const config::JobConfig& job, const BatchPaths& paths) {
  const config::LaunchConfig& l = job.launch();
  config::JobConfig embedded = job;  // its run directory absolute, as the script's
  embedded.mutable_launch()->set_run_dir(paths.run_dir);
  const std::string config_text = FormatResolvedConfig(embedded);
  std::string s = absl::StrCat("#!/bin/bash\n# Kelvin job ", job.name(),
                               ", written by `kelvin launch`; submit it with sbatch. It trains the "
                               "job config embedded below\n# (SLURM keeps each submitted script: "
                               "a later launch changes nothing of this job).\n");
  const auto directive = [&s](const std::string& option) {
    absl::StrAppend(&s, "#SBATCH ", option, "\n");
  };
  directive("--job-name=" + job.name());
  directive(absl::StrCat("--nodes=", l.nodes()));
  directive(absl::StrCat("--ntasks-per-node=", l.processes_per_node()));
  if (l.gpus_per_node() > 0) directive(absl::StrCat("--gpus-per-node=", l.gpus_per_node()));
  if (l.cpus_per_process() > 0) directive(absl::StrCat("--cpus-per-task=", l.cpus_per_process()));
  directive("--mem=" + l.memory_per_node());
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
  directive("--output=" + LiteralFilenamePattern(paths.run_dir) + "/slurm-%j.out");
  directive("--chdir=" + paths.working_dir);  // relative paths of the job as at launch
  for (const std::string& option : l.extra_sbatch_options()) directive(option);
  absl::StrAppend(&s, "set -euo pipefail\n");
  for (const std::string& line : l.setup_commands()) absl::StrAppend(&s, line, "\n");
  if (l.cpus_per_process() > 0) {
    if (job.training().threads() == 0) {
      absl::StrAppend(&s, "export OMP_NUM_THREADS=", l.cpus_per_process(), "\n");
    }
    // srun of Slurm >= 22.05 does not take --cpus-per-task from the job: each task would get one.
    absl::StrAppend(&s, "export SRUN_CPUS_PER_TASK=", l.cpus_per_process(), "\n");
  }
  const std::string run_dir = ShellQuote(paths.run_dir);
  const std::string delimiter = HeredocDelimiter(config_text);
  absl::StrAppend(
      &s, "run_dir=", run_dir, "\n",
      // A job submitted by hand is recorded too: a later launch into this directory is refused.
      "grep -qsx \"$SLURM_JOB_ID\" \"$run_dir/", kSlurmJobsFile, "\" || echo \"$SLURM_JOB_ID\" >> ",
      "\"$run_dir/", kSlurmJobsFile, "\"\n",
      "job_config=\"$run_dir/job-$SLURM_JOB_ID.textproto\"\n", "cat > \"$job_config\" <<'",
      delimiter, "'\n", config_text, delimiter, "\n", "stopped=\"$run_dir/",
      training::kStoppedForPreemptionFile, "\"\n", "finished=\"$run_dir/", training::kFinishedFile,
      "\"\n", "rm -f \"$stopped\" \"$finished\"\n",
      "echo \"kelvin: SLURM job $SLURM_JOB_ID, $SLURM_NNODES node(s), restart "
      "${SLURM_RESTART_COUNT:-0}\"\n",
      "status=0\n",
      // A rank that fails ends every other one at once.
      "srun --mpi=", l.mpi_plugin(), " --kill-on-bad-exit=1 ", ShellQuote(paths.kelvin_binary),
      " train \"$job_config\" || status=$?\n");
  // A run that saved a checkpoint and stopped on a signal (the time-limit warning, or a
  // preemption) leaves the stop marker: with requeue the job goes back in the queue and resumes.
  // The markers, not srun's exit code, decide: with --kill-on-bad-exit the ranks still exiting may
  // be killed and srun report 137, and srun exits 0 when a task failed to start. Each run
  // completes at least one step before it looks for a signal, so the requeues cannot loop idle.
  absl::StrAppend(&s, "if [ -e \"$stopped\" ]; then\n");
  if (l.requeue()) {
    absl::StrAppend(&s,
                    "  echo \"kelvin: $(cat \"$stopped\"), checkpoint saved; requeueing job "
                    "$SLURM_JOB_ID to continue\"\n",
                    "  scontrol requeue \"$SLURM_JOB_ID\"\n");
  } else {
    absl::StrAppend(&s,
                    "  echo \"kelvin: $(cat \"$stopped\"), checkpoint saved; submit this script "
                    "again to continue\"\n");
  }
  absl::StrAppend(
      &s, "elif [ \"$status\" -eq 0 ] && [ ! -e \"$finished\" ]; then\n",
      "  echo \"kelvin: srun exited 0 but the training did not finish (no $finished): a task "
      "failed to start or was lost; see the lines above\" >&2\n",
      "  exit 1\n", "fi\n", "exit \"$status\"\n");
  return s;
}

absl::StatusOr<BatchJob> WriteBatchJob(const config::JobConfig& job,
                                       const std::string& kelvin_binary) {
  std::error_code error;
  const fs::path dir = fs::absolute(job.launch().run_dir(), error);
  const fs::path working_dir = fs::current_path(error);
  if (error || UnsafeInScript(dir.string()) || UnsafeInScript(working_dir.string()) ||
      UnsafeInScript(kelvin_binary)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launch.run_dir=\"", job.launch().run_dir(), "\" from ", working_dir.string(),
        " (kelvin at ", kelvin_binary,
        "): use directories without spaces, quotes, backslashes or control characters (they go "
        "into #SBATCH --output and --chdir and the script's lines)"));
  }
  if (const std::vector<std::string> live = LiveJobsUsing(job); !live.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "launch.run_dir=\"", job.launch().run_dir(), "\"",
        job.checkpoint().dir().empty()
            ? ""
            : absl::StrCat(" or checkpoint.dir=\"", job.checkpoint().dir(), "\""),
        " belongs to SLURM job ", absl::StrJoin(live, ", "),
        ": a second job would train into the same checkpoints; wait for it to end, cancel it "
        "(scancel), or give this launch its own launch.run_dir and checkpoint.dir"));
  }
  fs::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("launch.run_dir: cannot create ", dir.string(), ": ", error.message()));
  }
  // The job runs its own copy: a rebuild of the checkout while the job waits in the queue (or
  // between its requeues) changes nothing of what it runs.
  const BatchJob batch{(dir / (job.name() + ".sbatch")).string(), (dir / kKelvinCopy).string()};
  KELVIN_RETURN_IF_ERROR(CopyExecutable(kelvin_binary, batch.kelvin_copy));
  KELVIN_RETURN_IF_ERROR(io::WriteFileAtomically(
      batch.script_path,
      {SbatchScript(job, {batch.kelvin_copy, dir.string(), working_dir.string()})}));
  return batch;
}

absl::Status RecordSubmittedJob(const config::JobConfig& job, const std::string& job_id) {
  for (const fs::path& dir : RegistryDirectories(job)) {
    std::error_code error;
    fs::create_directories(dir, error);
    const fs::path path = dir / kSlurmJobsFile;
    std::ofstream out(path, std::ios::app);
    out << job_id << "\n";
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot append to ", path.string()));
  }
  return absl::OkStatus();
}

std::vector<std::string> LiveJobsUsing(const config::JobConfig& job) {
  std::set<std::string> ids;
  for (const fs::path& dir : RegistryDirectories(job)) {
    std::ifstream in(dir / kSlurmJobsFile);
    for (std::string line; std::getline(in, line);) {
      const std::string id(absl::StripAsciiWhitespace(line));
      if (!id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
            return absl::ascii_isdigit(static_cast<unsigned char>(c));
          })) {
        ids.insert(id);
      }
    }
  }
  if (ids.empty() || OutputOf("command -v squeue").empty()) return {};
  static const std::set<std::string> kEnded = {"COMPLETED", "CANCELLED", "FAILED",
                                               "TIMEOUT",   "NODE_FAIL", "OUT_OF_MEMORY",
                                               "BOOT_FAIL", "DEADLINE",  "PREEMPTED"};
  const char* self = std::getenv("SLURM_JOB_ID");  // a launch from inside the job itself
  std::vector<std::string> live;
  for (const std::string& id : ids) {
    if (self != nullptr && id == self) continue;
    const std::string state = OutputOf("squeue -h -o %T -j " + id + " 2>/dev/null");
    if (!state.empty() && !kEnded.count(state)) live.push_back(absl::StrCat(id, " (", state, ")"));
  }
  return live;
}

std::optional<std::string> SbatchJobId(absl::string_view line) {
  const auto all_of = [](absl::string_view text, bool (*allowed)(char)) {
    return !text.empty() && std::all_of(text.begin(), text.end(), allowed);
  };
  const auto digit = [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); };
  const auto name = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  };
  absl::string_view id = line, cluster;
  if (absl::ConsumePrefix(&id, "Submitted batch job ")) {  // sbatch without --parsable
    if (const size_t on = id.find(" on cluster "); on != absl::string_view::npos) {
      cluster = id.substr(on + 12);
      id = id.substr(0, on);
      if (!all_of(cluster, name)) return std::nullopt;
    }
  } else if (const size_t semicolon = id.find(';'); semicolon != absl::string_view::npos) {
    cluster = id.substr(semicolon + 1);
    id = id.substr(0, semicolon);
    if (!all_of(cluster, name)) return std::nullopt;
  }
  if (id.size() > 20 || !all_of(id, digit)) return std::nullopt;
  return std::string(id);
}

absl::StatusOr<SubmittedJob> SubmitBatchJob(const std::string& script_path) {
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
  // The id is the last line; sbatch's warnings (stderr) come before it.
  const size_t last_line = message.rfind('\n');
  const absl::string_view last = absl::StripAsciiWhitespace(
      absl::string_view(message).substr(last_line == std::string::npos ? 0 : last_line + 1));
  const std::optional<std::string> id = SbatchJobId(last);
  if (!id.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sbatch ", script_path,
                     " exited 0 but its answer does not end in a job id (\"N\" or "
                     "\"N;cluster\"): \"",
                     absl::CHexEscape(message.substr(0, 2000)),
                     "\". Check with squeue whether the job was queued before submitting again"));
  }
  return SubmittedJob{
      *id, last_line == std::string::npos ? std::string() : message.substr(0, last_line)};
}

}  // namespace kelvin::launcher
