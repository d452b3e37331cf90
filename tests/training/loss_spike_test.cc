// training.loss_spike: the rule's verdicts on a window of recent losses; a run at lr 30 (a finite
// divergence: the loss climbs to 1e5) stops at its first spike with a message naming the step,
// the loss, the reference and the checkpoint to resume from, saving nothing after it; SKIP_STEP
// leaves the weights as they were; a healthy run is unchanged bit for bit; the recent losses are
// in every checkpoint, so a resumed run judges as the uninterrupted one.
#include "training/loss_spike.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "launcher/config/job_config.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

config::LossSpikeConfig Rule(config::LossSpikeConfig::Action action, double factor = 10,
                             int window = 3, int max_skips = 2, double min_loss = 1) {
  config::LossSpikeConfig config;
  config.set_action(action);
  config.set_factor(factor);
  config.set_window(window);
  config.set_max_skips(max_skips);
  config.set_min_loss(min_loss);
  return config;
}

TEST(LossSpikeRule, ALossAboveFactorTimesTheMeanOfTheWindowStops) {
  LossSpikeRule rule(Rule(config::LossSpikeConfig::STOP));
  // The first step has no reference; then the window holds the last 3 kept losses.
  EXPECT_EQ(rule.Judge(1000).verdict, LossSpikeRule::Verdict::kKeep);
  for (const double loss : {4.0, 2.0, 3.0}) {
    EXPECT_EQ(rule.Judge(loss).verdict, LossSpikeRule::Verdict::kKeep) << loss;
  }
  EXPECT_EQ(rule.Judge(30).verdict, LossSpikeRule::Verdict::kKeep);  // 10 x mean(4, 2, 3) = 30
  const LossSpikeRule::Judgement spike = rule.Judge(117.1);          // 10 x mean(2, 3, 30) = 116.7
  EXPECT_EQ(spike.verdict, LossSpikeRule::Verdict::kStop);
  EXPECT_DOUBLE_EQ(spike.reference, (2.0 + 3.0 + 30.0) / 3);
  const std::string message(
      rule.StopError(7, 117.1, spike, 30, "resume from step_00000005").message());
  EXPECT_THAT(message, HasSubstr("training.loss_spike: the loss of step 7 is 117.1, more than "
                                 "factor=10 times the mean 11.6667 of the last 3 step(s) kept"));
  EXPECT_THAT(message, HasSubstr("Lower optimizer.lr (now 30)"));
  EXPECT_THAT(message, HasSubstr("resume from step_00000005"));
}

TEST(LossSpikeRule, SkipStepSkipsUpToMaxSkipsInARowThenStops) {
  LossSpikeRule rule(Rule(config::LossSpikeConfig::SKIP_STEP));
  rule.Judge(2);
  EXPECT_EQ(rule.Judge(50).verdict, LossSpikeRule::Verdict::kSkip);
  EXPECT_EQ(rule.Judge(2.5).verdict, LossSpikeRule::Verdict::kKeep);  // the row ends
  EXPECT_EQ(rule.Judge(50).verdict, LossSpikeRule::Verdict::kSkip);
  EXPECT_EQ(rule.Judge(60).verdict, LossSpikeRule::Verdict::kSkip);
  EXPECT_EQ(rule.Judge(70).verdict, LossSpikeRule::Verdict::kStop);  // a third in a row
  // Skipped losses stay out of the window.
  EXPECT_EQ(rule.Record(), (LossSpikeRecord{{2, 2.5}, 3, 2}));
}

TEST(LossSpikeRule, LossesUpToMinLossAreNeverSpikes) {
  LossSpikeRule rule(Rule(config::LossSpikeConfig::STOP));
  rule.Judge(0.01);
  EXPECT_EQ(rule.Judge(0.9).verdict, LossSpikeRule::Verdict::kKeep);  // 90 x, but below 1
  EXPECT_EQ(rule.Judge(1.0).verdict, LossSpikeRule::Verdict::kKeep);  // < 10 x mean(0.01, 0.9)
  EXPECT_EQ(rule.Judge(6.5).verdict, LossSpikeRule::Verdict::kStop);  // > 10 x 0.637, > 1
}

TEST(LossSpikeRule, OffKeepsEveryStep) {
  LossSpikeRule rule(Rule(config::LossSpikeConfig::OFF));
  rule.Judge(1);
  EXPECT_EQ(rule.Judge(1e6).verdict, LossSpikeRule::Verdict::kKeep);
}

TEST(LossSpikeRule, ARestoredRuleJudgesAsTheOneItWasSavedFrom) {
  LossSpikeRule saved(Rule(config::LossSpikeConfig::SKIP_STEP));
  for (const double loss : {5.0, 4.0, 3.5, 3.25, 100.0}) saved.Judge(loss);
  LossSpikeRule restored(Rule(config::LossSpikeConfig::SKIP_STEP));
  restored.Restore(saved.Record());
  EXPECT_EQ(restored.Record(), saved.Record());
  for (const double loss : {3.0, 60.0, 61.0, 62.0}) {
    const LossSpikeRule::Judgement a = saved.Judge(loss), b = restored.Judge(loss);
    EXPECT_EQ(a.verdict, b.verdict) << loss;
    EXPECT_EQ(a.reference, b.reference) << loss;
  }
  // A smaller window keeps the newest losses.
  LossSpikeRule narrower(Rule(config::LossSpikeConfig::STOP, 10, 2));
  narrower.Restore({{1, 2, 3}, 0, 0});
  EXPECT_EQ(narrower.Record().recent_losses, (std::vector<double>{2, 3}));
}

// The demo job at a handful of quick steps, checkpoints every step into `dir` ("" = none).
config::JobConfig SmallJob(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "lr_schedule.warmup_steps=2",   "training.steps=4",
      "training.seq_length=110",      "training.micro_batch_size=2",
      "training.global_batch_size=4", "training.eval_interval=100",
      "training.export_hf_dir=\"\"",  "logging.log_interval=1"};
  if (!dir.empty()) {
    overrides.push_back("checkpoint.dir=\"" + dir + "\"");
    overrides.push_back("checkpoint.interval_steps=1");
  }
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  absl::StatusOr<config::JobConfig> job =
      launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kelvin_loss_spike_" + name);
  fs::remove_all(dir);
  return dir.string();
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// lr 30 reached over a warmup of 30 steps (1, 2, 3, ...): the loss of the demo job climbs from
// 5.6 to 1e5 (finite throughout).
const std::vector<std::string> kDiverging = {"optimizer.lr=30", "lr_schedule.type=CONSTANT",
                                             "lr_schedule.warmup_steps=30", "training.steps=30"};

TEST(LossSpikeTraining, ADivergingRunStopsAtItsFirstSpikeOrSkipsItsUpdates) {
  const std::string dir = FreshDir("diverging");
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(SmallJob(dir, kDiverging));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const absl::Status stopped = (*trainer)->Run();
  ASSERT_FALSE(stopped.ok());
  const std::vector<StepStats>& history = (*trainer)->history();
  ASSERT_EQ(history.size(), 2u) << "the divergence did not stop at step 3";
  EXPECT_EQ(stopped.code(), absl::StatusCode::kAborted);
  const std::string message(stopped.message());
  EXPECT_THAT(message, HasSubstr("training.loss_spike: the loss of step 3 is "));
  EXPECT_THAT(message, HasSubstr(absl::StrFormat("more than factor=10 times the mean %.6g of the "
                                                 "last 2 step(s) kept",
                                                 (history[0].loss + history[1].loss) / 2)));
  EXPECT_THAT(message, HasSubstr("Lower optimizer.lr (now 30)"));
  // The checkpoints of the steps before it, none of the diverged state; the one of step 2 holds
  // the weights that gave the spike: the advice is the one before it.
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{StepDirectoryName(1), StepDirectoryName(2)}));
  EXPECT_THAT(message, HasSubstr(absl::StrCat(
                           "resume from ", (fs::path(dir) / StepDirectoryName(1)).string(),
                           ": move the newer checkpoints (steps 2) out of checkpoint.dir")));

  // SKIP_STEP: the diverged weights keep giving spikes, two skipped steps, then the stop; the
  // skipped updates were never applied: the weights are those the stop left.
  std::vector<std::string> skipping = kDiverging;
  skipping.push_back("training.loss_spike.action=SKIP_STEP");
  skipping.push_back("training.loss_spike.max_skips=2");
  absl::StatusOr<std::unique_ptr<Trainer>> skipper = Trainer::Create(SmallJob("", skipping));
  ASSERT_TRUE(skipper.ok()) << skipper.status();
  const absl::Status skipped_then_stopped = (*skipper)->Run();
  ASSERT_FALSE(skipped_then_stopped.ok());
  EXPECT_THAT(std::string(skipped_then_stopped.message()), HasSubstr("the loss of step 5 is"));
  EXPECT_THAT(std::string(skipped_then_stopped.message()),
              HasSubstr("after 2 step(s) skipped in a row (training.loss_spike.max_skips=2)"));
  ASSERT_EQ((*skipper)->history().size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*skipper)->history()[i].skipped, i >= 2) << i;
  for (const ParameterSet::Entry& e : (*trainer)->model().parameters().entries()) {
    EXPECT_TRUE(
        testing::BitIdentical((*skipper)->model().parameters().value(e.name), e.value, e.name));
  }
  fs::remove_all(dir);
}

TEST(LossSpikeTraining, AHealthyRunIsUnchangedBitForBit) {
  absl::StatusOr<std::unique_ptr<Trainer>> judged = Trainer::Create(SmallJob(""));
  absl::StatusOr<std::unique_ptr<Trainer>> unjudged =
      Trainer::Create(SmallJob("", {"training.loss_spike.action=OFF"}));
  ASSERT_TRUE(judged.ok() && unjudged.ok());
  ASSERT_TRUE((*judged)->Run().ok());
  ASSERT_TRUE((*unjudged)->Run().ok());
  ASSERT_EQ((*judged)->history().size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*judged)->history()[i].loss, (*unjudged)->history()[i].loss) << i;
    EXPECT_FALSE((*judged)->history()[i].skipped) << i;
  }
  for (const ParameterSet::Entry& e : (*unjudged)->model().parameters().entries()) {
    EXPECT_TRUE(
        testing::BitIdentical((*judged)->model().parameters().value(e.name), e.value, e.name));
  }
}

TEST(LossSpikeTraining, CheckpointsHoldTheRecentLossesAndAResumeGoesOnFromThem) {
  const std::string whole_dir = FreshDir("whole"), resumed_dir = FreshDir("resumed");
  const std::vector<std::string> window = {"training.loss_spike.window=3"};
  absl::StatusOr<std::unique_ptr<Trainer>> whole = Trainer::Create(SmallJob(whole_dir, window));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->Run().ok());
  // Step 2's checkpoint: the losses of steps 1 and 2, bit for bit.
  absl::StatusOr<CheckpointIndex> second_index =
      ReadCheckpointIndex(fs::path(whole_dir) / StepDirectoryName(2));
  ASSERT_TRUE(second_index.ok()) << second_index.status();
  ASSERT_TRUE(second_index->loss_spike.has_value());
  EXPECT_EQ(second_index->loss_spike->recent_losses,
            (std::vector<double>{(*whole)->history()[0].loss, (*whole)->history()[1].loss}));
  // A run of 2 steps, resumed to 4: its last checkpoint's window is the uninterrupted run's.
  std::vector<std::string> two = window;
  two.push_back("training.steps=2");
  two.push_back("lr_schedule.decay_steps=4");
  absl::StatusOr<std::unique_ptr<Trainer>> first = Trainer::Create(SmallJob(resumed_dir, two));
  ASSERT_TRUE(first.ok() && (*first)->Run().ok());
  absl::StatusOr<std::unique_ptr<Trainer>> second = Trainer::Create(SmallJob(resumed_dir, window));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ((*second)->start_step(), 2);
  ASSERT_TRUE((*second)->Run().ok());
  const absl::StatusOr<CheckpointIndex> a =
      ReadCheckpointIndex(fs::path(whole_dir) / StepDirectoryName(4));
  const absl::StatusOr<CheckpointIndex> b =
      ReadCheckpointIndex(fs::path(resumed_dir) / StepDirectoryName(4));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->loss_spike.has_value() && b->loss_spike.has_value());
  EXPECT_EQ(a->loss_spike->recent_losses.size(), 3u);
  EXPECT_EQ(*a->loss_spike, *b->loss_spike);
  fs::remove_all(whole_dir);
  fs::remove_all(resumed_dir);
}

TEST(LossSpikeTraining, ADamagedRecordIsAClearError) {
  const std::string dir = FreshDir("damaged_record");
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallJob(dir, {"training.steps=1", "lr_schedule.warmup_steps=0"}));
  ASSERT_TRUE(trainer.ok() && (*trainer)->Run().ok());
  const fs::path step = fs::path(dir) / StepDirectoryName(1);
  const std::string index = testing::FileBytes(step / "checkpoint.json");
  const size_t at = index.find("\"recent_losses\": [");
  ASSERT_NE(at, std::string::npos) << index;
  // A loss is a cross-entropy: a number, finite and >= 0 (a negative one would make every later
  // loss a "spike" and blame the training).
  for (const std::string bad : {"\"5\"", "-5"}) {
    SCOPED_TRACE(bad);
    std::ofstream(step / "checkpoint.json")
        << index.substr(0, at) << "\"recent_losses\": [" << bad << ", " << index.substr(at + 18);
    const absl::StatusOr<CheckpointIndex> read = ReadCheckpointIndex(step);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(read.status().message()),
                HasSubstr((step / "checkpoint.json").string() + ": \"loss_spike\" holds the loss " +
                          bad + ", not a finite number >= 0"));
  }
  fs::remove_all(dir);
}

TEST(LossSpikeTraining, AFactorOfOneOrLessNamesTheField) {
  const absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      testing::DemoJobPath(), {"training.loss_spike.factor=1", "training.loss_spike.window=0"});
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("training.loss_spike.factor=1 must be a finite number > 1"));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("training.loss_spike.window"));
}

}  // namespace
}  // namespace kelvin::training
