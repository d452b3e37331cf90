// `kelvin launch`'s batch job: the script of a full and of a default launch section, the files
// written (the resolved job parses back to the same job), and sbatch's answers through fake sbatch
// programs on PATH (a job id, a refusal, no sbatch at all).
#include "launcher/slurm_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "launcher/job_config.h"

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

TEST(SlurmBatch, ScriptOfAFullLaunchSection) {
  const config::JobConfig job =
      Job({"launch.nodes=4", "launch.processes_per_node=8", "launch.gpus_per_node=8",
           "launch.cpus_per_process=6", "launch.time_limit=1-00:00:00", "launch.partition=gpu",
           "launch.account=proj", "launch.qos=high", "launch.preemption_warning_seconds=180",
           "launch.requeue=true"});
  config::JobConfig with_lists = job;
  with_lists.mutable_launch()->add_setup_commands("module load cuda/13");
  with_lists.mutable_launch()->add_extra_sbatch_options("--exclusive");
  EXPECT_EQ(SbatchScript(with_lists, {"/opt/kelvin/bin/kelvin", "/runs/ssa8b/ssa8b.textproto",
                                      "/runs/ssa8b/slurm-%j.out", "/home/me/kelvin"}),
            "#!/bin/bash\n"
            "# Kelvin job ssa8b, written by `kelvin launch`; submit it with sbatch.\n"
            "# It trains /runs/ssa8b/ssa8b.textproto\n"
            "#SBATCH --job-name=ssa8b\n"
            "#SBATCH --nodes=4\n"
            "#SBATCH --ntasks-per-node=8\n"
            "#SBATCH --gpus-per-node=8\n"
            "#SBATCH --cpus-per-task=6\n"
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
            "echo \"kelvin: SLURM job $SLURM_JOB_ID, $SLURM_NNODES node(s), restart "
            "${SLURM_RESTART_COUNT:-0}\"\n"
            "marker='/ckpt/ssa8b/STOPPED_FOR_PREEMPTION'\n"
            "rm -f \"$marker\"\n"
            "status=0\n"
            "srun --mpi=pmix --kill-on-bad-exit=1 '/opt/kelvin/bin/kelvin' train "
            "'/runs/ssa8b/ssa8b.textproto' || status=$?\n"
            "if [ -e \"$marker\" ]; then\n"
            "  echo \"kelvin: $(cat \"$marker\"), checkpoint saved; requeueing job $SLURM_JOB_ID "
            "to continue\"\n"
            "  scontrol requeue \"$SLURM_JOB_ID\"\n"
            "fi\n"
            "exit \"$status\"\n");
}

TEST(SlurmBatch, DefaultLaunchAsksForOneTaskAndNothingElse) {
  const std::string script = SbatchScript(Job({}), {"/k", "/c.textproto", "/r/slurm-%j.out", "/w"});
  EXPECT_THAT(script, HasSubstr("#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n"));
  EXPECT_THAT(script, HasSubstr("restart ${SLURM_RESTART_COUNT:-0}\"\nsrun --mpi=pmix "
                                "--kill-on-bad-exit=1 '/k' train '/c.textproto'\n"));
  for (const char* absent : {"--gpus", "--cpus", "--time", "--partition", "--account", "--qos",
                             "--signal", "--requeue", "OMP_NUM_THREADS", "scontrol"}) {
    EXPECT_THAT(script, Not(HasSubstr(absent)));
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

TEST_F(SlurmBatchFiles, WritesTheScriptAndTheResolvedJobThatParsesBack) {
  const config::JobConfig job = Job({"launch.run_dir=" + (dir_ / "run").string()});
  const absl::StatusOr<BatchJob> batch = WriteBatchJob(job, "/opt/kelvin");
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->script_path, (dir_ / "run" / "ssa8b.sbatch").string());
  EXPECT_EQ(
      ReadFile(batch->script_path),
      SbatchScript(job, {"/opt/kelvin", batch->config_path,
                         (dir_ / "run" / "slurm-%j.out").string(), fs::current_path().string()}));
  const absl::StatusOr<config::JobConfig> back = LoadJobConfig(batch->config_path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatResolvedConfig(*back), FormatResolvedConfig(job));
}

TEST_F(SlurmBatchFiles, RunDirWithASpaceIsRefused) {
  const absl::StatusOr<BatchJob> batch =
      WriteBatchJob(Job({"launch.run_dir=" + (dir_ / "my runs").string()}), "/k");
  EXPECT_THAT(batch.status().message(),
              HasSubstr(": use directories without spaces (they go into #SBATCH --output and "
                        "--chdir)"));
}

TEST_F(SlurmBatchFiles, SubmitReturnsSbatchsJobId) {
  FakeSbatch("echo \"$@\" > " + (dir_ / "args").string() + "; echo '4242;cluster-a'");
  const absl::StatusOr<std::string> id = SubmitBatchJob("/r/job.sbatch");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "4242");
  EXPECT_EQ(ReadFile(dir_ / "args"), "--parsable /r/job.sbatch\n");
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
