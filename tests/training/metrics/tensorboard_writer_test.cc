// TensorBoard event files: CRC-32C against its published check value, and a file written by the
// writer read back record by record (framing, both masked CRCs, the version record, each scalar's
// tag, step and value); the trainer writes its curves when logging.tensorboard_dir is set.
#include "training/metrics/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "configs/tensorboard_event.pb.h"
#include "launcher/config/job_config.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

uint64_t ReadLittleEndian(const std::string& bytes, size_t at, int count) {
  uint64_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

// Every Event of the one event file in `directory`, each record's CRCs checked.
std::vector<tensorboard::Event> ReadEvents(const std::string& directory) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    files.push_back(entry.path());
  }
  EXPECT_EQ(files.size(), 1u);
  EXPECT_EQ(files.front().filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::ifstream in(files.front(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    const uint64_t length = ReadLittleEndian(bytes, at, 8);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 8, 4), MaskedCrc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 12 + length, 4), MaskedCrc32c(data));
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    events.push_back(event);
    at += 12 + length + 4;
  }
  EXPECT_EQ(at, bytes.size());
  return events;
}

TEST(TensorBoard, WritesVersionThenScalars) {
  const std::string dir = ::testing::TempDir() + "/tensorboard_writer";
  std::filesystem::remove_all(dir);
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(dir);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddScalar("train/loss", 1, 2.5).ok());
    ASSERT_TRUE((*writer)->AddScalar("eval/loss", 7, 0.125).ok());
  }
  const std::vector<tensorboard::Event> events = ReadEvents(dir);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.7e9);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].step(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(events[2].step(), 7);
  EXPECT_EQ(events[2].summary().value(0).tag(), "eval/loss");
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.125f);
  std::filesystem::remove_all(dir);
}

// The event file appears with the first scalar: a run that fails before it logs anything (a full
// disk, a bad checkpoint) leaves no header-only file behind.
TEST(TensorBoard, NoFileUntilTheFirstScalar) {
  const std::string dir = ::testing::TempDir() + "/tensorboard_lazy";
  std::filesystem::remove_all(dir);
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(dir);
    ASSERT_TRUE(writer.ok()) << writer.status();
    EXPECT_TRUE(std::filesystem::is_empty(dir));
    EXPECT_FALSE(std::filesystem::exists((*writer)->path()));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(TensorBoard, UnwritableDirectoryIsAClearError) {
  const absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer =
      TensorBoardWriter::Open("/proc/kelvin_tensorboard");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(std::string(writer.status().message()).find("logging.tensorboard_dir"),
            std::string::npos)
      << writer.status();
}

TEST(TensorBoard, TrainerWritesItsCurves) {
  const std::string dir = ::testing::TempDir() + "/tensorboard_trainer";
  std::filesystem::remove_all(dir);
  const std::string demo = (std::filesystem::path(KELVIN_FIXTURES_DIR).parent_path().parent_path() /
                            "configs" / "passkey_tiny_cpu.textproto")
                               .string();
  absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      demo, {"training.steps=2", "lr_schedule.warmup_steps=1", "training.eval_interval=2",
             "training.eval_steps=1", "training.export_hf_dir=\"\"", "model.ssa.enabled=true",
             "logging.tensorboard_dir=\"" + dir + "\""});
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  std::map<std::string, std::vector<std::pair<int64_t, float>>> curves;
  for (const tensorboard::Event& event : ReadEvents(dir)) {
    for (const tensorboard::Summary::Value& v : event.summary().value()) {
      curves[v.tag()].emplace_back(event.step(), v.simple_value());
    }
  }
  ASSERT_EQ(curves["train/loss"].size(), 2u);
  EXPECT_EQ(curves["train/loss"][0].first, 1);
  EXPECT_EQ(curves["train/loss"][1].first, 2);
  EXPECT_EQ(curves["train/loss"][1].second, static_cast<float>((*trainer)->history()[1].loss));
  EXPECT_EQ(curves["train/learning_rate"].size(), 2u);
  EXPECT_EQ(curves["train/grad_norm"].size(), 2u);
  EXPECT_EQ(curves["train/tokens_per_second"].size(), 2u);
  EXPECT_EQ(curves["train/tflops_per_process"].size(), 2u);
  EXPECT_EQ(curves["train/peak_memory_gib"].size(), 2u);
  EXPECT_EQ(curves.count("train/mfu"), 0u);  // no logging.peak_tflops
  ASSERT_EQ(curves["eval/loss"].size(), 1u);
  EXPECT_EQ(curves["eval/loss"][0].first, 2);
  EXPECT_EQ(curves["eval/passkey_retrieval"].size(), 1u);
  EXPECT_EQ(curves["ssa/layer_3/tau_q_mean"].size(), 2u);  // the tiny preset's 4 layers
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training
