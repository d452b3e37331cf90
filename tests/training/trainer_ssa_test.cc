// The trainer fine-tunes with SSA: the demo job with model.ssa on trains a few steps, the loss is
// finite, every step records per-layer temperature statistics (what the progress lines log), the
// first step's are those of docs/ssa.md with zero read-outs (tau^v = 1, tau^q = 1 + sigma(alpha)
// ln(p + 1)), and the read-outs then leave zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "tests/testing/tolerance.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

// The demo job with SSA and rows of 110 tokens, after `overrides`, trained to its end.
std::unique_ptr<Trainer> TrainedSsaDemo(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"model.ssa.enabled=true", "lr_schedule.warmup_steps=1",
                                       "training.seq_length=110", "training.export_hf_dir=\"\""});
  const absl::StatusOr<config::JobConfig> job =
      launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return nullptr;
  const absl::Status ran = (*trainer)->Run();
  EXPECT_TRUE(ran.ok()) << ran;
  return ran.ok() ? *std::move(trainer) : nullptr;
}

TEST(TrainerSsa, DemoWithSsaTrainsAndRecordsTemperatureStatistics) {
  const std::unique_ptr<Trainer> trainer = TrainedSsaDemo(
      {"training.steps=3", "training.micro_batch_size=2", "training.global_batch_size=2",
       "training.eval_interval=3", "training.eval_steps=1", "logging.log_interval=1"});
  ASSERT_NE(trainer, nullptr);

  const std::vector<StepStats>& history = trainer->history();
  ASSERT_EQ(history.size(), 3u);
  const int64_t layers = trainer->model().config().num_layers;
  const int64_t heads = trainer->model().config().num_attention_heads;
  for (const StepStats& step : history) {
    EXPECT_TRUE(std::isfinite(step.loss));
    ASSERT_EQ(static_cast<int64_t>(step.temperatures.size()), layers);
    const ssa::TemperatureStatistics& first = step.temperatures.front();
    EXPECT_EQ(first.query.count, 2 * 110 * heads);
    EXPECT_GT(first.value.count, 0);
    EXPECT_EQ(static_cast<int64_t>(first.sigma_alpha.size()), heads);
  }
  // Step 1 runs with the read-outs at their zero start: tanh(0) = 0, so every value temperature is
  // 1 and a query temperature is 1 + sigma(alpha_h) ln(p + 1): 1 at each row's position 0, at most
  // 1 + max_h sigma(alpha_h) ln(110) at its last.
  for (const ssa::TemperatureStatistics& layer : history.front().temperatures) {
    EXPECT_EQ(layer.value.min, 1.0);
    EXPECT_EQ(layer.value.max, 1.0);
    EXPECT_EQ(layer.value.std, 0.0);
    const double slope = *std::max_element(layer.sigma_alpha.begin(), layer.sigma_alpha.end());
    EXPECT_GT(slope, 0.0);
    EXPECT_EQ(layer.query.min, 1.0);
    EXPECT_GT(layer.query.max, 1.0);
    EXPECT_LE(layer.query.max, 1.0 + slope * std::log(110.0) * (1 + testing::kF32RelTol));
  }
  // After the first update the read-outs are no longer zero, so the temperatures vary.
  EXPECT_GT(history.back().temperatures.front().query.std, 0.0);
  EXPECT_GT(history.back().temperatures.front().value.std, 0.0);
  double readout_norm = 0;
  for (const ParameterSet::Entry& e : trainer->model().parameters().entries()) {
    if (e.name.ends_with("ssa.query_readout")) {
      for (int64_t i = 0; i < e.value.numel(); ++i)
        readout_norm += std::abs(e.value.data<float>()[i]);
    }
  }
  EXPECT_GT(readout_norm, 0.0);
}

// Without a metrics file or TensorBoard only the steps with a progress line (every
// logging.log_interval-th and the last) read their temperatures; the others skip the host copies.
TEST(TrainerSsa, OnlyTheStepsThatReportTemperaturesRecordThem) {
  const std::unique_ptr<Trainer> trainer = TrainedSsaDemo(
      {"training.steps=5", "training.micro_batch_size=2", "training.global_batch_size=4",
       "training.eval_interval=0", "logging.log_interval=2"});
  ASSERT_NE(trainer, nullptr);
  const std::vector<StepStats>& history = trainer->history();
  ASSERT_EQ(history.size(), 5u);
  const int64_t layers = trainer->model().config().num_layers;
  const int64_t heads = trainer->model().config().num_attention_heads;
  for (size_t step = 1; step <= history.size(); ++step) {
    const bool reports = step % 2 == 0 || step == 5;
    const std::vector<ssa::TemperatureStatistics>& t = history[step - 1].temperatures;
    ASSERT_EQ(static_cast<int64_t>(t.size()), reports ? layers : 0) << "step " << step;
    // The last micro-batch's (of 2): its 2 rows of 110 tokens, every head.
    if (reports) {
      EXPECT_EQ(t.front().query.count, 2 * 110 * heads) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace kelvin::training
