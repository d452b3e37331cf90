// A model directory whose config.json sizes are valid but not those of its weights: the error names
// the tensor, both shapes and the config fields, from the safetensors headers, before any model
// buffer is allocated (OpenHfWeightsFor, which the trainer, eval/generate and launch call first).
#include "models/llama/hf_weight_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/testing/files.h"

namespace kelvin::models {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kModel = std::string(KELVIN_FIXTURES_DIR) + "/hf_ssa/full/model";

// The fixture SSA model with config.json's `field` set to `value`, in a fresh directory.
std::string ModelWith(const std::string& field, int64_t value) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kelvin_hf_weight_check_" + field);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"config.json", "model.safetensors"}) {
    fs::copy_file(fs::path(kModel) / name, dir / name);
  }
  nlohmann::json config = nlohmann::json::parse(testing::FileBytes(dir / "config.json"));
  config[field] = value;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

std::string ErrorOpening(const std::string& dir) {
  const absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfDirectory(dir);
  EXPECT_TRUE(config.ok()) << config.status();  // within bounds: only the weights disagree
  if (!config.ok()) return "";
  return std::string(OpenHfWeightsFor(dir, *config).status().message());
}

TEST(HfWeightCheck, TheFixtureMatchesItsConfig) {
  const absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfDirectory(kModel);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(OpenHfWeightsFor(kModel, *config).ok());
}

// The fixture: vocab 160, hidden 64, intermediate 128, 4 heads of 16, 2 KV heads, 2 layers.
TEST(HfWeightCheck, ASizeFarFromTheWeightsNamesTensorShapesAndField) {
  const std::string vocab = ModelWith("vocab_size", 1000000);
  EXPECT_EQ(ErrorOpening(vocab),
            vocab +
                ": tensor \"model.embed_tokens.weight\" has shape [160, 64] but the model config "
                "(vocab_size=1000000) gives it [1000000, 64]: is config.json from the same "
                "model? Fix config.json (or model.architecture), or use the weights that go "
                "with it");
  EXPECT_THAT(ErrorOpening(ModelWith("intermediate_size", 131072)),
              HasSubstr("has shape [128, 64] but the model config (intermediate_size=131072) "
                        "gives it [131072, 64]"));
  EXPECT_THAT(ErrorOpening(ModelWith("num_key_value_heads", 4)),
              HasSubstr("tensor \"model.layers.0.self_attn.k_proj.weight\" has shape [32, 64] but "
                        "the model config (num_key_value_heads=4, head_dim=16) gives it [64, 64]"));
}

// hidden_size moves every tensor; the first one compared is named with the field.
TEST(HfWeightCheck, HiddenSizeIsNamed) {
  EXPECT_THAT(ErrorOpening(ModelWith("hidden_size", 4096)),
              HasSubstr("(hidden_size=4096) gives it"));
}

TEST(HfWeightCheck, MoreLayersThanTheWeightsHoldNamesTheLayerCount) {
  const std::string dir = ModelWith("num_hidden_layers", 1000);
  EXPECT_EQ(ErrorOpening(dir),
            dir +
                " holds the weights of 2 layers but the model config has "
                "num_hidden_layers=1000 (no tensor \"model.layers.2.input_layernorm.weight\"): "
                "is config.json from the same model? Set num_hidden_layers to 2, or use the "
                "weights that go with this config.json");
}

TEST(HfWeightCheck, ADirectoryWithoutWeightsIsAnError) {
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_hf_weight_check_config_only";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(kModel) / "config.json", dir / "config.json");
  const absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfDirectory(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(std::string(OpenHfWeightsFor(dir.string(), *config).status().message()),
              HasSubstr(dir.string() + ": has neither model.safetensors nor "
                                       "model.safetensors.index.json"));
}

}  // namespace
}  // namespace kelvin::models
