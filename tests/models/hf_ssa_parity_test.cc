// Kelvin against its own SSA modeling code in transformers (tools/check_hf_export.py), on the
// fixture's SSA exports of two trained tiny models (full SSA; weight sharing off with a clamp):
// the same logits and greedy tokens as transformers, and the modeling code this binary ships is
// the one the fixture was made with, so the two cannot drift apart unnoticed.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/io/safetensors.h"
#include "models/llama/hf_modeling_code.h"
#include "models/llama/llama_decoder.h"
#include "models/llama/llama_model.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/hf_ssa/";

class HfSsaParity : public ::testing::TestWithParam<std::string> {};

// Read back with the settings of its config.json, the model gives the logits transformers computed
// on a packed batch (position ids restart) within 1e-5.
TEST_P(HfSsaParity, KelvinGivesTheLogitsTransformersComputed) {
  const std::string model_dir = kFixtures + GetParam() + "/model";
  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(model_dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->ssa.has_value()) << "config.json's \"ssa\" object was not read";
  models::LlamaModel model(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(model_dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE(model.LoadHfCheckpoint(*checkpoint).ok());

  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixtures + GetParam() + "/packed.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const Tensor tokens = testing::Cast(*golden->Read("input_ids"), DType::kI32);
  const Tensor positions = testing::Cast(*golden->Read("position_ids"), DType::kI32);
  const Tensor expected = *golden->Read("logits", DType::kF64);
  Tensor& logits = model.Forward(Context::Cpu(), tokens, positions);
  EXPECT_TRUE(
      testing::AllClose(logits, expected.View(logits.shape()), testing::kF32RelTol, "logits"));
}

// Kelvin's KV-cache decoder generates the 32 greedy tokens transformers' generate() did.
TEST_P(HfSsaParity, GreedyDecodingWithTheCacheGivesTransformersTokens) {
  const std::string model_dir = kFixtures + GetParam() + "/model";
  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(model_dir);
  ASSERT_TRUE(config.ok()) << config.status();
  models::LlamaModel model(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(model_dir);
  ASSERT_TRUE(checkpoint.ok() && model.LoadHfCheckpoint(*checkpoint).ok());
  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixtures + GetParam() + "/packed.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const Tensor prompts = testing::Cast(*golden->Read("prompt"), DType::kI32);  // [2, 9]
  const Tensor greedy = testing::Cast(*golden->Read("greedy"), DType::kI32);   // [2, 9 + 32]
  absl::StatusOr<models::LlamaDecoder> decoder = models::LlamaDecoder::Create(model, 64);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  for (int64_t row = 0; row < prompts.dim(0); ++row) {
    decoder->Reset();
    const int32_t* prompt = prompts.data<int32_t>() + row * prompts.dim(1);
    std::vector<int32_t> next(prompt, prompt + prompts.dim(1));
    std::vector<int32_t> generated;
    while (static_cast<int64_t>(generated.size()) + prompts.dim(1) < greedy.dim(1)) {
      absl::StatusOr<Tensor> logits = decoder->Append(next);
      ASSERT_TRUE(logits.ok()) << logits.status();
      const float* last = logits->data<float>() + (logits->dim(0) - 1) * logits->dim(1);
      next = {static_cast<int32_t>(std::max_element(last, last + logits->dim(1)) - last)};
      generated.push_back(next[0]);
    }
    const int32_t* expected = greedy.data<int32_t>() + row * greedy.dim(1) + prompts.dim(1);
    EXPECT_EQ(generated, std::vector<int32_t>(expected, expected + generated.size()))
        << "row " << row;
  }
}

TEST_P(HfSsaParity, TheShippedModelingCodeIsTheOneTheFixtureWasMadeWith) {
  for (const auto& [name, code] : models::SsaHfModelingFiles()) {
    EXPECT_EQ(testing::FileBytes(kFixtures + GetParam() + "/model/" + name), code)
        << name << " changed since the fixture was made: run tools/check_hf_export.py "
        << "BUILD/launcher/kelvin --write-fixture, which checks the new code in transformers";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfSsaParity,
                         ::testing::Values("full", "weight_sharing_off_clamp"));

}  // namespace
}  // namespace kelvin
