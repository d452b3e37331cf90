// `kelvin launch`'s batch job: the script of a full and of a default launch section, the files
// written (the resolved job parses back to the same job), and sbatch's answers through fake sbatch
// programs on PATH (a job id, a refusal, no sbatch at all).
#include "launcher/slurm/slurm_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "launcher/config/job_config.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = R"pb(
  name: "ssa8b"
  model { preset: "tiny" }
  data { passkey {} }
  optimizer { lr: 1e-3 }
  training { steps: 10 global_batch_size: 4 seq_length: 128 }
  checkpoint { dir: "/ckpt/ssa8b" }
)pb";

config::JobConfig Job(const std::vector<std::string>& overrides) {
  absl::StatusOr<config::JobConfig> job = ParseJobConfig(kJob, "ssa8b.textproto", overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : config::JobConfig();
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The job config a script embeds (between its heredoc lines).
std::string EmbeddedJob(const std::string& script) {
  const std::string open = "<<'KELVIN_JOB_CONFIG'\n";
  const size_t begin = script.find(open);
  const size_t end = script.find("\nKELVIN_JOB_CONFIG\n");
  if (begin == std::string::npos || end == std::string::npos) return "";
  return script.substr(begin + open.size(), end + 1 - begin - open.size());
}

TEST(SlurmBatch, ScriptOfAFullLaunchSection) {
  const config::JobConfig job =
      Job({"launch.nodes=4", "launch.processes_per_node=8", "launch.gpus_per_node=8",
           "launch.cpus_per_process=6", "launch.time_limit=1-00:00:00", "launch.partition=gpu",
           "launch.account=proj", "launch.qos=high", "launch.preemption_warning_seconds=180",
           "launch.requeue=true", "launch.mpi_plugin=pmi2", "launch.memory_per_node=500G"});
  config::JobConfig with_lists = job;
  with_lists.mutable_launch()->add_setup_commands("module load cuda/13");
  with_lists.mutable_launch()->add_extra_sbatch_options("--exclusive");
  const std::string script =
      SbatchScript(with_lists, {"/opt/kelvin/bin/kelvin", "/runs/ssa8b", "/home/me/kelvin"});
  config::JobConfig embedded = with_lists;
  embedded.mutable_launch()->set_run_dir("/runs/ssa8b");
  EXPECT_EQ(EmbeddedJob(script), FormatResolvedConfig(embedded));
  EXPECT_EQ(script,
            "#!/bin/bash\n"
            "# Kelvin job ssa8b, written by `kelvin launch`; submit it with sbatch. It trains the "
            "job config embedded below\n"
            "# (SLURM keeps each submitted script: a later launch changes nothing of this job).\n"
            "#SBATCH --job-name=ssa8b\n"
            "#SBATCH --nodes=4\n"
            "#SBATCH --ntasks-per-node=8\n"
            "#SBATCH --gpus-per-node=8\n"
            "#SBATCH --cpus-per-task=6\n"
            "#SBATCH --mem=500G\n"
            "#SBATCH --time=1-00:00:00\n"
            "#SBATCH --partition=gpu\n"
            "#SBATCH --account=proj\n"
            "#SBATCH --qos=high\n"
            "#SBATCH --signal=USR1@180\n"
            "#SBATCH --requeue\n"
            "#SBATCH --open-mode=append\n"
            "#SBATCH --output=/runs/ssa8b/slurm-%j.out\n"
            "#SBATCH --chdir=/home/me/kelvin\n"
            "#SBATCH --exclusive\n"
            "set -euo pipefail\n"
            "module load cuda/13\n"
            "export OMP_NUM_THREADS=6\n"
            "export SRUN_CPUS_PER_TASK=6\n"
            "run_dir='/runs/ssa8b'\n"
            "grep -qsx \"$SLURM_JOB_ID\" \"$run_dir/slurm_jobs\" || echo \"$SLURM_JOB_ID\" >> "
            "\"$run_dir/slurm_jobs\"\n"
            "job_config=\"$run_dir/job-$SLURM_JOB_ID.textproto\"\n"
            "cat > \"$job_config\" <<'KELVIN_JOB_CONFIG'\n" +
                FormatResolvedConfig(embedded) +
                "KELVIN_JOB_CONFIG\n"
                "stopped=\"$run_dir/STOPPED_FOR_PREEMPTION\"\n"
                "finished=\"$run_dir/FINISHED\"\n"
                "rm -f \"$stopped\" \"$finished\"\n"
                "echo \"kelvin: SLURM job $SLURM_JOB_ID, $SLURM_NNODES node(s), restart "
                "${SLURM_RESTART_COUNT:-0}\"\n"
                "status=0\n"
                "srun --mpi=pmi2 --kill-on-bad-exit=1 '/opt/kelvin/bin/kelvin' train "
                "\"$job_config\" || status=$?\n"
                "if [ -e \"$stopped\" ]; then\n"
                "  echo \"kelvin: $(cat \"$stopped\"), checkpoint saved; requeueing job "
                "$SLURM_JOB_ID to continue\"\n"
                "  scontrol requeue \"$SLURM_JOB_ID\"\n"
                "elif [ \"$status\" -eq 0 ] && [ ! -e \"$finished\" ]; then\n"
                "  echo \"kelvin: srun exited 0 but the training did not finish (no $finished): a "
                "task failed to start or was lost; see the lines above\" >&2\n"
                "  exit 1\n"
                "fi\n"
                "exit \"$status\"\n");
}

// One task with all of the node's memory (a site's per-CPU default would kill the job when it
// loads or saves), started through PMIx.
TEST(SlurmBatch, DefaultLaunchAsksForOneTaskAndNothingElse) {
  const std::string script = SbatchScript(Job({}), {"/k", "/r", "/w"});
  EXPECT_THAT(script,
              HasSubstr("#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --mem=0\n"));
  EXPECT_THAT(script, HasSubstr("srun --mpi=pmix --kill-on-bad-exit=1 '/k' train \"$job_config\""));
  EXPECT_THAT(script, HasSubstr("submit this script again to continue"));
  for (const char* absent :
       {"--gpus", "--cpus", "--time", "--partition", "--account", "--qos", "--signal", "--requeue",
        "OMP_NUM_THREADS", "SRUN_CPUS_PER_TASK", "scontrol"}) {
    EXPECT_THAT(script, Not(HasSubstr(absent)));
  }
}

// The script is valid bash, and what the job holds cannot become a line of it: the embedded
// config's strings (here a newline and a command substitution in the data path) stay inside the
// quoted heredoc.
TEST(SlurmBatch, ScriptIsBashAndTheJobsStringsStayData) {
  config::JobConfig job = Job({"launch.requeue=true", "launch.preemption_warning_seconds=60"});
  job.mutable_data()->mutable_token_file()->set_path("/d/$(touch /tmp/pwned)\nrm -rf /");
  const std::string script = SbatchScript(job, {"/k", "/r", "/w"});
  const fs::path path = fs::path(::testing::TempDir()) / "kelvin_batch_syntax.sbatch";
  std::ofstream(path) << script;
  EXPECT_EQ(std::system(("bash -n " + path.string()).c_str()), 0) << script;
  EXPECT_THAT(script, Not(HasSubstr("\nrm -rf /")));  // printed escaped: "\\n"
  EXPECT_THAT(EmbeddedJob(script), HasSubstr("$(touch /tmp/pwned)\\nrm -rf /"));
  fs::remove(path);
}

// sbatch reads --output as a filename pattern: a '%' of the run directory is written "%%" (its
// literal percent sign), so that the log lands in the run directory, not in one named after the
// job id (%j) or the job name (%x).
TEST(SlurmBatch, PercentInTheRunDirectoryIsLiteralForSbatch) {
  const std::string script = SbatchScript(Job({}), {"/k", "/runs/100%x_%j%%", "/w"});
  EXPECT_THAT(script, HasSubstr("#SBATCH --output=/runs/100%%x_%%j%%%%/slurm-%j.out\n"));
  EXPECT_THAT(script, HasSubstr("run_dir='/runs/100%x_%j%%'\n"));
}

// The job id is all of sbatch's answer or nothing: --parsable's "N" and "N;cluster", and
// "Submitted batch job N" of an sbatch that ignores --parsable (a site's wrapper).
TEST(SlurmBatch, JobIdIsParsedStrictly) {
  EXPECT_EQ(SbatchJobId("4242"), "4242");
  EXPECT_EQ(SbatchJobId("4242;cluster-a"), "4242");
  EXPECT_EQ(SbatchJobId("Submitted batch job 77"), "77");
  EXPECT_EQ(SbatchJobId("Submitted batch job 77 on cluster b.2"), "77");
  for (const char* not_an_id :
       {"", ";", "4242;", ";c", "42 42", "-1", "4242;clu ster", "sbatch: error: try again",
        "Submitted batch job", "Submitted batch job x", "Submitted batch job 7 on cluster ",
        "123456789012345678901", "4242\n"}) {
    EXPECT_EQ(SbatchJobId(not_an_id), std::nullopt) << absl::CHexEscape(not_an_id);
  }
}

class SlurmBatchFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("slurm_batch_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    old_path_ = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  }
  void TearDown() override {
    setenv("PATH", old_path_.c_str(), 1);
    fs::remove_all(dir_);
  }
  // A program `sbatch` in dir_/bin (first on PATH) running `body` (sh).
  void FakeSbatch(const std::string& body) {
    fs::create_directories(dir_ / "bin");
    std::ofstream(dir_ / "bin" / "sbatch") << "#!/bin/sh\n" << body << "\n";
    fs::permissions(dir_ / "bin" / "sbatch", fs::perms::owner_all);
    setenv("PATH", ((dir_ / "bin").string() + ":" + old_path_).c_str(), 1);
  }
  fs::path dir_;
  std::string old_path_;
};

// The script runs a copy of the kelvin binary in the run directory: rebuilding the checkout while
// the job waits in the queue changes nothing of what it runs.
TEST_F(SlurmBatchFiles, WritesTheScriptWhoseEmbeddedJobParsesBack) {
  const config::JobConfig job = Job({"launch.run_dir=" + (dir_ / "run").string()});
  const fs::path binary = dir_ / "build" / "kelvin";
  fs::create_directories(binary.parent_path());
  std::ofstream(binary) << "the binary at launch";
  const absl::StatusOr<BatchJob> batch = WriteBatchJob(job, binary.string());
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::ofstream(binary) << "a rebuild";
  EXPECT_EQ(batch->script_path, (dir_ / "run" / "ssa8b.sbatch").string());
  EXPECT_EQ(batch->kelvin_copy, (dir_ / "run" / "kelvin").string());
  EXPECT_EQ(ReadFile(batch->kelvin_copy), "the binary at launch");
  EXPECT_EQ(fs::status(batch->kelvin_copy).permissions() & fs::perms::owner_exec,
            fs::perms::owner_exec);
  const std::string script = ReadFile(batch->script_path);
  EXPECT_EQ(script, SbatchScript(job, {batch->kelvin_copy, (dir_ / "run").string(),
                                       fs::current_path().string()}));
  EXPECT_THAT(script, HasSubstr("'" + batch->kelvin_copy + "' train"));
  const absl::StatusOr<config::JobConfig> back =
      ParseJobConfig(EmbeddedJob(script), "embedded.textproto");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatResolvedConfig(*back), FormatResolvedConfig(job));
}

TEST_F(SlurmBatchFiles, RunDirWithASpaceIsRefused) {
  const absl::StatusOr<BatchJob> batch =
      WriteBatchJob(Job({"launch.run_dir=" + (dir_ / "my runs").string()}), "/k");
  EXPECT_THAT(batch.status().message(),
              HasSubstr(": use directories without spaces, quotes, backslashes or control"));
}

TEST_F(SlurmBatchFiles, RunDirWithABackslashIsRefused) {
  const absl::StatusOr<BatchJob> batch =
      WriteBatchJob(Job({"launch.run_dir=" + (dir_ / "a\\\\b").string()}), "/k");
  EXPECT_THAT(batch.status().message(), HasSubstr("without spaces, quotes, backslashes"));
}

TEST_F(SlurmBatchFiles, MissingKelvinBinaryIsNamed) {
  const absl::StatusOr<BatchJob> batch = WriteBatchJob(
      Job({"launch.run_dir=" + (dir_ / "run").string()}), (dir_ / "nothing").string());
  EXPECT_THAT(batch.status().message(),
              HasSubstr("cannot read the kelvin binary " + (dir_ / "nothing").string()));
}

TEST_F(SlurmBatchFiles, SubmitReturnsSbatchsJobId) {
  FakeSbatch("echo \"$@\" > " + (dir_ / "args").string() + "; echo '4242;cluster-a'");
  const absl::StatusOr<SubmittedJob> job = SubmitBatchJob("/r/job.sbatch");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, "4242");
  EXPECT_EQ(job->other_output, "");
  EXPECT_EQ(ReadFile(dir_ / "args"), "--parsable /r/job.sbatch\n");
}

TEST_F(SlurmBatchFiles, SubmitKeepsSbatchsWarnings) {
  FakeSbatch("echo 'sbatch: warning: the partition is busy' >&2; echo 31");
  const absl::StatusOr<SubmittedJob> job = SubmitBatchJob("/r/job.sbatch");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, "31");
  EXPECT_EQ(job->other_output, "sbatch: warning: the partition is busy");
}

// An sbatch (or a site's wrapper) that exits 0 without a job id: its answer, not a made-up id.
TEST_F(SlurmBatchFiles, SubmitRefusesAnAnswerWithoutAJobId) {
  FakeSbatch("echo 'queued, see the portal'");
  EXPECT_EQ(SubmitBatchJob("/r/job.sbatch").status().message(),
            "sbatch /r/job.sbatch exited 0 but its answer does not end in a job id (\"N\" or "
            "\"N;cluster\"): \"queued, see the portal\". Check with squeue whether the job was "
            "queued before submitting again");
  FakeSbatch("true");
  EXPECT_THAT(SubmitBatchJob("/r/job.sbatch").status().message(),
              HasSubstr("does not end in a job id"));
}

TEST_F(SlurmBatchFiles, SubmitReportsSbatchsRefusal) {
  FakeSbatch("echo 'sbatch: error: invalid partition specified: gpu' >&2; exit 1");
  EXPECT_EQ(SubmitBatchJob("/r/job.sbatch").status().message(),
            "sbatch /r/job.sbatch failed: sbatch: error: invalid partition specified: gpu");
}

TEST_F(SlurmBatchFiles, SubmitWithoutSbatchSaysWhereToRunIt) {
  fs::create_directories(dir_ / "empty");
  setenv("PATH", (dir_ / "empty").string().c_str(), 1);
  EXPECT_THAT(SubmitBatchJob("/r/job.sbatch").status().message(),
              HasSubstr("sbatch was not found on PATH: run kelvin launch --submit on a SLURM "
                        "login node, or submit the written script there: sbatch /r/job.sbatch"));
}

}  // namespace
}  // namespace kelvin::launcher
