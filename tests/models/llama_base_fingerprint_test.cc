// The frozen base's fingerprint: the same for the same bytes wherever they lie, another for one
// byte changed in one tensor; for a random base, the same for the same seed and another for
// another seed; and what a model records when it loads or draws a frozen base.
#include "models/llama/llama_base_fingerprint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/llama/hf_weight_check.h"
#include "models/llama/llama_model.h"

namespace kelvin::models {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(KELVIN_FIXTURES_DIR) + "/llama_tiny/model";

LlamaConfig TinyConfig() {
  absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfDirectory(kModel);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : LlamaConfig{};
}

LlamaBase BaseOf(const std::string& directory, const LlamaConfig& config) {
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(directory);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return checkpoint.ok() ? HfBaseOf(*checkpoint, config) : LlamaBase{};
}

TEST(LlamaBaseFingerprint, FollowsTheStoredBytesOfEveryTensor) {
  const LlamaConfig config = TinyConfig();
  const LlamaBase base = BaseOf(kModel, config);
  EXPECT_EQ(base.source, kModel);
  const fs::path copy = fs::path(::testing::TempDir()) / "kelvin_base_fingerprint";
  fs::remove_all(copy);
  fs::create_directories(copy);
  for (const char* file : {"config.json", "model.safetensors"}) {
    fs::copy_file(fs::path(kModel) / file, copy / file);
  }
  const LlamaBase copied = BaseOf(copy.string(), config);
  EXPECT_EQ(copied.fingerprint, base.fingerprint) << "the same bytes in another directory";

  // The lowest bit of the last layer's down projection's first element flipped (the data
  // section starts after the 8-byte header length and the header).
  const std::string name = LayerParameterName(config.num_layers - 1, "mlp.down_proj.weight");
  size_t begin = 0;
  {
    absl::StatusOr<io::SafetensorsFile> file =
        io::SafetensorsFile::Open((copy / "model.safetensors").string());
    ASSERT_TRUE(file.ok()) << file.status();
    const io::SafetensorsEntry* entry = file->Find(name);
    ASSERT_NE(entry, nullptr) << name;
    begin = entry->begin;
  }
  std::fstream bytes(copy / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  bytes.read(reinterpret_cast<char*>(&header), sizeof(header));  // little-endian, as x86-64
  const auto offset = static_cast<std::streamoff>(sizeof(header) + header + begin);
  char first = 0;
  bytes.seekg(offset);
  bytes.read(&first, 1);
  first = static_cast<char>(first ^ 1);
  bytes.seekp(offset);
  bytes.write(&first, 1);
  bytes.close();
  const LlamaBase changed = BaseOf(copy.string(), config);
  EXPECT_NE(changed.fingerprint, base.fingerprint) << name << " changed";
  fs::remove_all(copy);
}

TEST(LlamaBaseFingerprint, OfARandomBaseFollowsTheSeed) {
  const LlamaConfig config = TinyConfig();
  EXPECT_EQ(RandomBaseOf(config, 7).fingerprint, RandomBaseOf(config, 7).fingerprint);
  EXPECT_NE(RandomBaseOf(config, 7).fingerprint, RandomBaseOf(config, 8).fingerprint);
  EXPECT_EQ(RandomBaseOf(config, 7).source, "random weights from seed 7");
}

// A model records its base only when it is frozen (config.trainable), from the source it was
// given.
TEST(LlamaBaseFingerprint, IsRecordedByAModelOnAFrozenBase) {
  LlamaConfig config = TinyConfig();
  LlamaModel full(config, DType::kF32);
  full.InitRandom(3);
  EXPECT_FALSE(full.frozen_base().has_value());
  config.trainable = TrainableSets{.norms = true};
  LlamaModel drawn(config, DType::kF32);
  drawn.InitRandom(3);
  ASSERT_TRUE(drawn.frozen_base().has_value());
  EXPECT_EQ(drawn.frozen_base()->fingerprint, RandomBaseOf(config, 3).fingerprint);
  absl::StatusOr<io::HfCheckpoint> checkpoint = OpenHfWeightsFor(kModel, config);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  LlamaModel loaded(config, DType::kF32);
  ASSERT_TRUE(loaded.LoadHfCheckpoint(*checkpoint).ok());
  ASSERT_TRUE(loaded.frozen_base().has_value());
  EXPECT_EQ(loaded.frozen_base()->fingerprint, HfBaseOf(*checkpoint, config).fingerprint);
  EXPECT_NE(loaded.frozen_base()->fingerprint, drawn.frozen_base()->fingerprint);
}

}  // namespace
}  // namespace kelvin::models
