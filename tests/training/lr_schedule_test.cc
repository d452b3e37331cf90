// Learning-rate schedules against their closed forms at the steps that matter: the warmup ramp,
// the start and end of each decay, a midpoint, and the floor after decay_steps; and the resolved
// default of cooldown_steps.
#include "training/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "tests/testing/tolerance.h"

namespace kelvin::training {
namespace {

config::LrScheduleConfig Schedule(config::LrScheduleConfig::Type type) {
  config::LrScheduleConfig schedule;
  schedule.set_type(type);
  schedule.set_warmup_steps(10);
  schedule.set_min_lr_ratio(0.1);
  schedule.set_decay_steps(110);
  schedule.set_cooldown_steps(20);
  return schedule;
}

constexpr double kLr = 2.0;
constexpr int64_t kSteps = 200;

double At(const config::LrScheduleConfig& schedule, int64_t step) {
  return LearningRateAt(schedule, kLr, kSteps, step);
}

TEST(LrSchedule, EveryTypeWarmsUpLinearly) {
  for (const auto type :
       {config::LrScheduleConfig::CONSTANT, config::LrScheduleConfig::COSINE,
        config::LrScheduleConfig::LINEAR, config::LrScheduleConfig::WARMUP_STABLE_DECAY}) {
    const config::LrScheduleConfig schedule = Schedule(type);
    EXPECT_DOUBLE_EQ(At(schedule, 0), 0.2) << type;  // base_lr / warmup_steps
    EXPECT_DOUBLE_EQ(At(schedule, 4), 1.0) << type;
    EXPECT_DOUBLE_EQ(At(schedule, 9), 2.0) << type;
    EXPECT_DOUBLE_EQ(At(schedule, 10), 2.0) << type;  // the decays start at their peak
  }
  EXPECT_DOUBLE_EQ(At(Schedule(config::LrScheduleConfig::CONSTANT), 150), 2.0);
}

TEST(LrSchedule, CosineAndLinearDescendToTheFloorAtDecaySteps) {
  const config::LrScheduleConfig cosine = Schedule(config::LrScheduleConfig::COSINE);
  const config::LrScheduleConfig linear = Schedule(config::LrScheduleConfig::LINEAR);
  // Step 35: a quarter of the 100 decay steps.
  EXPECT_NEAR(At(cosine, 35), 0.2 + 1.8 * 0.5 * (1 + std::cos(std::numbers::pi / 4)),
              testing::kClosedFormAbsTol);
  EXPECT_NEAR(At(linear, 35), 2.0 - 1.8 * 0.25, testing::kClosedFormAbsTol);
  EXPECT_NEAR(At(cosine, 60), 1.1, testing::kClosedFormAbsTol);  // halfway both are at the middle
  EXPECT_NEAR(At(linear, 60), 1.1, testing::kClosedFormAbsTol);
  for (const int64_t step : {110, 111, 199}) {
    EXPECT_NEAR(At(cosine, step), 0.2, testing::kClosedFormAbsTol) << step;
    EXPECT_NEAR(At(linear, step), 0.2, testing::kClosedFormAbsTol) << step;
  }
}

TEST(LrSchedule, WarmupStableDecayHoldsThenCoolsDown) {
  const config::LrScheduleConfig wsd = Schedule(config::LrScheduleConfig::WARMUP_STABLE_DECAY);
  EXPECT_DOUBLE_EQ(At(wsd, 50), 2.0);
  EXPECT_DOUBLE_EQ(At(wsd, 90), 2.0);  // the cooldown starts at 110 - 20
  EXPECT_NEAR(At(wsd, 95), 2.0 - 1.8 * 0.25, testing::kClosedFormAbsTol);  // a quarter into it
  EXPECT_NEAR(At(wsd, 100), 1.1, testing::kClosedFormAbsTol);
  EXPECT_NEAR(At(wsd, 110), 0.2, testing::kClosedFormAbsTol);
  EXPECT_NEAR(At(wsd, 150), 0.2, testing::kClosedFormAbsTol);
}

TEST(LrSchedule, CooldownDefaultsToAFifthOfTheDecay) {
  const absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      testing::DemoJobPath(), {"lr_schedule.type=WARMUP_STABLE_DECAY", "training.steps=130",
                               "lr_schedule.warmup_steps=30"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->lr_schedule().decay_steps(), 130);
  EXPECT_EQ(job->lr_schedule().cooldown_steps(), 20);
}

}  // namespace
}  // namespace kelvin::training
