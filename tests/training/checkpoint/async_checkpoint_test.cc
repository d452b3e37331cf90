// Background checkpoint saves (checkpoint.async_save): a run saving in the background writes the
// same files as one saving in turn and trains identically; a preempted run waits for its save and
// resumes bit for bit; the part holds the state as it was when the save began; an error every rank
// stops on commits the save in flight first; failures and a missing directory are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "launcher/config/job_config.h"
#include "parallel/comm/self_communicator.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "tests/testing/tensors.h"
#include "training/checkpoint/async_checkpoint_saver.h"
#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/preemption.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

// The world of one process, over which the saves are collective.
parallel::Communicator& OneProcessWorld() {
  static parallel::SelfCommunicator world("world", 0, Context::Cpu());
  return world;
}
using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kelvin_async_checkpoint_" + name);
  fs::remove_all(dir);
  return dir.string();
}

// The demo job, 4 quick steps, saving after every step into `dir`.
config::JobConfig SmallJob(const std::string& dir, bool async_save) {
  absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      testing::DemoJobPath(),
      {"model.ssa.enabled=true", "lr_schedule.warmup_steps=2", "training.steps=4",
       "training.seq_length=110", "training.micro_batch_size=2", "training.global_batch_size=4",
       "training.eval_interval=100", "training.export_hf_dir=\"\"", "logging.log_interval=100",
       "checkpoint.dir=\"" + dir + "\"", "checkpoint.interval_steps=1", "checkpoint.keep_last=0",
       absl::StrCat("checkpoint.async_save=", async_save ? "true" : "false")});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

TEST(AsyncCheckpoint, BackgroundSavesWriteTheSameFilesAsSavesInTurn) {
  const std::string in_turn = FreshDir("in_turn"), background = FreshDir("background");
  // One run identity for both: the bytes then depend on the saves alone.
  const TrainerTestOptions same_run{.run_id = "0123456789abcdef0123456789abcdef"};
  absl::StatusOr<std::unique_ptr<Trainer>> a =
      Trainer::Create(SmallJob(in_turn, false), MPI_COMM_WORLD, same_run);
  absl::StatusOr<std::unique_ptr<Trainer>> b =
      Trainer::Create(SmallJob(background, true), MPI_COMM_WORLD, same_run);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Run().ok());
  ASSERT_TRUE((*b)->Run().ok());
  ASSERT_EQ((*b)->history().size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*b)->history()[i].loss, (*a)->history()[i].loss);
  // Steps 1-3 written in the background, the last one (the run waits for it) in turn.
  ASSERT_EQ((*b)->saved_checkpoints().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*b)->saved_checkpoints()[i].written_in_background, i < 3) << i;
    EXPECT_FALSE((*a)->saved_checkpoints()[i].written_in_background) << i;
  }
  int compared = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(in_turn)) {
    const fs::path other = fs::path(background) / entry.path().filename();
    for (const char* file : {"checkpoint.json", "part_0_of_1.safetensors"}) {
      ASSERT_TRUE(fs::exists(other / file)) << other / file;
      EXPECT_TRUE(testing::FileBytes(entry.path() / file) == testing::FileBytes(other / file))
          << other / file;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8);  // steps 1 to 4, each complete: nothing left .partial
  EXPECT_EQ(std::distance(fs::directory_iterator(background), fs::directory_iterator()), 4);
  fs::remove_all(in_turn);
  fs::remove_all(background);
}

TEST(AsyncCheckpoint, PreemptedRunWaitsForItsSaveAndResumesBitForBit) {
  const std::string dir = FreshDir("preempted"), whole_dir = FreshDir("whole");
  absl::StatusOr<std::unique_ptr<Trainer>> whole = Trainer::Create(SmallJob(whole_dir, true));
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE((*whole)->Run().ok());
  absl::StatusOr<std::unique_ptr<Trainer>> first = Trainer::Create(SmallJob(dir, true));
  ASSERT_TRUE(first.ok());
  InstallPreemptionHandlers();
  std::raise(SIGUSR1);
  const absl::Status stopped = (*first)->Run();
  ClearPreemption();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled) << stopped;
  // The step-1 save began in the background and was committed before the stop.
  ASSERT_EQ((*first)->saved_checkpoints().size(), 1u);
  EXPECT_TRUE((*first)->saved_checkpoints()[0].written_in_background);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "step_00000001" / "part_0_of_1.safetensors"));
  absl::StatusOr<std::unique_ptr<Trainer>> second = Trainer::Create(SmallJob(dir, true));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->start_step(), 1);
  ASSERT_TRUE((*second)->Run().ok());
  ASSERT_EQ((*second)->history().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*second)->history()[i].loss, (*whole)->history()[i + 1].loss) << "step " << i + 2;
  }
  for (const ParameterSet::Entry& e : (*whole)->model().parameters().entries()) {
    EXPECT_TRUE(
        testing::BitIdentical((*second)->model().parameters().value(e.name), e.value, e.name));
  }
  fs::remove_all(dir);
  fs::remove_all(whole_dir);
}

TEST(AsyncCheckpoint, AnErrorOfEveryRankCommitsTheSaveInFlightFirst) {
  const std::string dir = FreshDir("diverged");
  config::JobConfig job = SmallJob(dir, true);
  job.mutable_optimizer()->set_lr(1e30);  // step 2's loss is not finite
  job.mutable_optimizer()->set_grad_clip_norm(0);
  job.mutable_lr_schedule()->set_warmup_steps(0);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const absl::Status diverged = (*trainer)->Run();
  ASSERT_FALSE(diverged.ok());
  // Steps are counted from 1, as the progress lines do: the one after the first save is step 2.
  EXPECT_THAT(std::string(diverged.message()),
              ::testing::ContainsRegex("the loss became .* at step 2:"));
  ASSERT_EQ((*trainer)->saved_checkpoints().size(), 1u);
  EXPECT_TRUE((*trainer)->saved_checkpoints()[0].written_in_background);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "step_00000001" / "checkpoint.json"));
  fs::remove_all(dir);
}

// A one-tensor training state over `data`.
TrainingState OneTensorState(const Tensor& data) {
  TrainingState state;
  state.tensors.push_back({"w", io::TensorRegion::Whole(data.shape()), data, true});
  state.job_tensors = {"w"};
  return state;
}

TEST(AsyncCheckpoint, ThePartHoldsTheStateAsItWasWhenTheSaveBegan) {
  const std::string dir = FreshDir("snapshot");
  Tensor live = testing::Random({5, 3}, DType::kF32, 4);
  const Tensor saved = testing::Cast(live, DType::kF32);  // a copy
  absl::StatusOr<PendingCheckpoint> pending = PendingCheckpoint::Begin(
      dir, 7, "job", OneTensorState(live), Context::Cpu(), OneProcessWorld(), true);
  ASSERT_TRUE(pending.ok()) << pending.status();
  ops::Fill(Context::Cpu(), live, 5.0);  // training goes on
  AsyncCheckpointSaver saver;
  saver.Start(std::move(*pending));
  EXPECT_TRUE(saver.in_flight());
  const absl::StatusOr<std::string> path = saver.Finish(OneProcessWorld());
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_FALSE(saver.in_flight());
  Tensor restored = Tensor::ZerosCpu({5, 3}, DType::kF32);
  const absl::StatusOr<RestoredSteps> steps =
      LoadCheckpoint(*path, "job", OneTensorState(restored), Context::Cpu());
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->steps_completed, 7);
  EXPECT_TRUE(testing::BitIdentical(restored, saved, "w"));
  fs::remove_all(dir);
}

// A failed background write is an error at the commit, which leaves no complete checkpoint.
TEST(AsyncCheckpoint, AFailedBackgroundWriteIsAnErrorAtTheCommit) {
  const std::string dir = FreshDir("failed");
  const Tensor data = testing::Random({4}, DType::kF32, 5);
  absl::StatusOr<PendingCheckpoint> pending = PendingCheckpoint::Begin(
      dir, 3, "job", OneTensorState(data), Context::Cpu(), OneProcessWorld(), true);
  ASSERT_TRUE(pending.ok()) << pending.status();
  const std::string part = pending->part_file();
  fs::remove_all(dir);  // the directory vanishes under the writer
  AsyncCheckpointSaver saver;
  saver.Start(std::move(*pending));
  const absl::StatusOr<std::string> path = saver.Finish(OneProcessWorld());
  ASSERT_FALSE(path.ok());
  EXPECT_THAT(std::string(path.status().message()), HasSubstr(part));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "step_00000003"));
}

// async_save without a checkpoint directory is a config error.
TEST(AsyncCheckpoint, NeedsACheckpointDirectory) {
  const absl::StatusOr<config::JobConfig> job =
      launcher::LoadJobConfig(testing::DemoJobPath(), {"checkpoint.async_save=true"});
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("checkpoint.async_save=true needs checkpoint.dir"));
}

}  // namespace
}  // namespace kelvin::training
