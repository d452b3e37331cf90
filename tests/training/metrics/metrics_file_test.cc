// logging.metrics_file: one JSON object per step and evaluation keyed by the TensorBoard tags, with
// the values the run logged; a resumed run keeps exactly the records up to its checkpoint (a
// stopped run's later steps and a line cut short are dropped) and appends its own; kelvin eval
// leaves it alone.
#include "training/metrics/metrics_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/commands/eval_command.h"
#include "launcher/config/job_config.h"
#include "nlohmann/json.hpp"
#include "tests/testing/files.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> Records(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

std::string Fresh(const std::string& name) {
  const fs::path path = fs::path(::testing::TempDir()) / ("kelvin_metrics_" + name);
  fs::remove_all(path);
  return path.string();
}

TEST(MetricsFile, RecordsAreKeyedByTagAndNonFiniteValuesAreNull) {
  const std::string path = Fresh("unit") + "/run/metrics.jsonl";  // its directory is created
  {
    absl::StatusOr<MetricsFile> metrics = MetricsFile::Open(path, 0);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    ASSERT_TRUE(metrics->Append(1, {{"train/loss", 2.5}, {"train/mfu", 0.375}}).ok());
    ASSERT_TRUE(metrics->Append(2, {{"train/loss", std::nan("")}}).ok());
  }
  const std::vector<nlohmann::json> records = Records(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].dump(), R"({"step":1,"train/loss":2.5,"train/mfu":0.375})");
  EXPECT_TRUE(records[1]["train/loss"].is_null());

  // A resume from step 1: step 2's record and a torn line go; step 1's stays, new ones follow.
  std::ofstream(path, std::ios::app) << R"({"step":3,"train/lo)";
  {
    absl::StatusOr<MetricsFile> metrics = MetricsFile::Open(path, 1);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    ASSERT_TRUE(metrics->Append(2, {{"train/loss", 1.25}}).ok());
  }
  EXPECT_EQ(testing::FileBytes(path),
            "{\"step\":1,\"train/loss\":2.5,\"train/mfu\":0.375}\n"
            "{\"step\":2,\"train/loss\":1.25}\n");
  // A fresh run (step 0) starts the file over.
  ASSERT_TRUE(MetricsFile::Open(path, 0).ok());
  EXPECT_EQ(testing::FileBytes(path), "");
  EXPECT_THAT(std::string(MetricsFile::Open("/proc/kelvin/metrics.jsonl", 0).status().message()),
              ::testing::HasSubstr("logging.metrics_file=\"/proc/kelvin/metrics.jsonl\": cannot"));
}

TEST(MetricsFile, AnotherFileAtThePathIsRefusedAndKept) {
  // A metrics_file naming the job file or a data file: emptying it would destroy the user's file.
  const std::string dir = Fresh("other");
  fs::create_directories(dir);
  for (const std::string& contents :
       {std::string("name: \"job\"\n"), std::string("MMIDIDX\0\0", 9)}) {
    const std::string path = dir + "/not_metrics";
    std::ofstream(path, std::ios::binary) << contents;
    for (const int64_t resumed_steps : {0, 5}) {
      const absl::StatusOr<MetricsFile> metrics = MetricsFile::Open(path, resumed_steps);
      EXPECT_THAT(std::string(metrics.status().message()),
                  ::testing::HasSubstr("logging.metrics_file=\"" + path +
                                       "\" exists and is not a metrics file"));
      EXPECT_EQ(testing::FileBytes(path), contents);
    }
  }
  // An empty file, and one of records written with spaces, are taken.
  std::ofstream(dir + "/empty");
  EXPECT_TRUE(MetricsFile::Open(dir + "/empty", 0).ok());
  std::ofstream(dir + "/spaced") << "{ \"step\": 1, \"train/loss\": 2}\n";
  EXPECT_TRUE(MetricsFile::Open(dir + "/spaced", 1).ok());
  EXPECT_EQ(testing::FileBytes(dir + "/spaced"), "{ \"step\": 1, \"train/loss\": 2}\n");
}

config::JobConfig DemoJob(const std::string& dir, int steps) {
  absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      testing::DemoJobPath(),
      {"training.steps=" + std::to_string(steps), "lr_schedule.warmup_steps=2",
       "training.seq_length=110", "training.micro_batch_size=2", "training.global_batch_size=4",
       "training.eval_interval=3", "training.eval_steps=1", "training.export_hf_dir=\"\"",
       "logging.log_interval=100", "checkpoint.dir=\"" + dir + "/checkpoints\"",
       "checkpoint.interval_steps=2", "logging.metrics_file=\"" + dir + "/metrics.jsonl\""});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

TEST(MetricsFile, ARunWritesWhatItLoggedAndAResumeKeepsOneHistory) {
  const std::string dir = Fresh("run");
  absl::StatusOr<std::unique_ptr<Trainer>> first = Trainer::Create(DemoJob(dir, 4));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Run().ok());
  // As if a later run had gone on past step 4 and stopped without a checkpoint.
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "{\"step\":5,\"train/loss\":9}\n";

  absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(DemoJob(dir, 6));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_EQ((*resumed)->start_step(), 4);
  ASSERT_TRUE((*resumed)->Run().ok());

  std::vector<double> losses, eval_losses;  // what the two runs logged, in order
  for (const auto* run : {first->get(), resumed->get()}) {
    for (const StepStats& s : run->history()) losses.push_back(s.loss);
    for (const inference::EvalStats& e : run->evaluations()) eval_losses.push_back(e.loss);
  }
  std::vector<int64_t> steps;
  std::vector<double> logged, logged_eval;
  for (const nlohmann::json& record : Records(dir + "/metrics.jsonl")) {
    if (record.contains("train/loss")) {
      steps.push_back(record["step"].get<int64_t>());
      logged.push_back(record["train/loss"].get<double>());
      EXPECT_TRUE(record.contains("train/learning_rate") && record.contains("train/grad_norm"));
    } else {
      ASSERT_TRUE(record.contains("eval/loss")) << record.dump();
      logged_eval.push_back(record["eval/loss"].get<double>());
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(logged, losses);            // bit for bit: JSON numbers round-trip doubles
  EXPECT_EQ(logged_eval, eval_losses);  // steps 3, 4 (the first run's end) and 6
  EXPECT_EQ(logged_eval.size(), 3u);
  // kelvin eval of the same job leaves the training history alone.
  const std::string history = testing::FileBytes(dir + "/metrics.jsonl");
  ASSERT_TRUE(inference::EvaluateJob(DemoJob(dir, 6)).ok());
  EXPECT_EQ(testing::FileBytes(dir + "/metrics.jsonl"), history);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training
