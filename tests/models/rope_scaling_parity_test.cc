// Kelvin against transformers' rotary embedding for every RoPE scaling it computes for Llama (a
// raised rope_theta, linear, yarn, yarn with DeepSeek's mscales, longrope, llama3, dynamic) and an
// SSA Llama with yarn (tools/make_rope_fixture.py): the logits of a call 4x the original context
// length and of one within it (LongRoPE's short factors), by the training forward and by the
// decoder; dynamic NTK decoded call by call; and export -> import -> export bit-identical,
// config.json in the form its source used.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/safetensors.h"
#include "models/llama/llama_decoder.h"
#include "models/llama/llama_model.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/rope/";

class RopeScalingParity : public ::testing::TestWithParam<std::string> {
 protected:
  std::string ModelDir() const { return kFixtures + GetParam() + "/model"; }

  // The fixture's model, read with the settings of its config.json.
  models::LlamaModel Load(const std::string& dir) const {
    absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(dir);
    EXPECT_TRUE(config.ok()) << config.status();
    models::LlamaModel model(*config, DType::kF32);
    absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_TRUE(model.LoadHfCheckpoint(*checkpoint).ok());
    return model;
  }

  io::SafetensorsFile Golden() const {
    absl::StatusOr<io::SafetensorsFile> golden =
        io::SafetensorsFile::Open(kFixtures + GetParam() + "/logits.safetensors");
    EXPECT_TRUE(golden.ok()) << golden.status();
    return std::move(*golden);
  }
};

// The case's scaling was read (not left at default RoPE), the SSA case as SSA.
TEST_P(RopeScalingParity, ConfigJsonIsReadWithItsScaling) {
  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(ModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string name = GetParam();
  const std::string type = name == "theta"                                  ? "default"
                           : name.starts_with("yarn") || name == "ssa_yarn" ? "yarn"
                                                                            : name;
  EXPECT_EQ(ops::RopeTypeName(config->rope.type), type);
  EXPECT_EQ(config->ssa.has_value(), name == "ssa_yarn");
  if (name == "theta") {
    EXPECT_EQ(config->rope.theta, 40000.0);
  }
}

// One forward over 128 positions (original length 32) and one over the first 32, each as one
// transformers call: the logits within 1e-5 relative.
TEST_P(RopeScalingParity, KelvinGivesTheLogitsTransformersComputed) {
  models::LlamaModel model = Load(ModelDir());
  io::SafetensorsFile golden = Golden();
  for (const std::string prefix : {"", "short_"}) {
    const Tensor tokens = testing::Cast(*golden.Read(prefix + "input_ids"), DType::kI32);
    const Tensor positions = testing::Cast(*golden.Read(prefix + "position_ids"), DType::kI32);
    const Tensor expected = *golden.Read(prefix + "logits", DType::kF64);
    Tensor& logits = model.Forward(Context::Cpu(), tokens, positions);
    EXPECT_TRUE(testing::AllClose(logits, expected.View(logits.shape()), testing::kF32RelTol,
                                  prefix + "logits"));
  }
}

// The KV-cache decoder, the 128 tokens appended in one call: the same logits.
TEST_P(RopeScalingParity, TheDecoderGivesTheLogitsTransformersComputed) {
  models::LlamaModel model = Load(ModelDir());
  io::SafetensorsFile golden = Golden();
  const Tensor tokens = testing::Cast(*golden.Read("input_ids"), DType::kI32);  // [1, 128]
  const Tensor expected = *golden.Read("logits", DType::kF64);                  // [1, 128, V]
  absl::StatusOr<models::LlamaDecoder> decoder = models::LlamaDecoder::Create(model, 128);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const int32_t* ids = tokens.data<int32_t>();
  absl::StatusOr<Tensor> logits = decoder->Append(std::vector<int32_t>(ids, ids + tokens.numel()));
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_TRUE(testing::AllClose(*logits, expected.View(logits->shape()), testing::kF32RelTol,
                                "decoder logits"));
}

// Export, import, export: config.json and the weights bit-identical, the RoPE fields in the form
// the fixture's config.json used (transformers 4's rope_theta + rope_scaling, or 5's
// rope_parameters), read back to the same settings. The exports stay in the test's temporary
// directory (TEST_TMPDIR): tools/make_rope_fixture.py --check-exports loads them in transformers.
TEST_P(RopeScalingParity, ExportImportExportIsBitIdenticalInTheSourcesForm) {
  const fs::path base = fs::path(::testing::TempDir()) / ("kelvin_rope_" + GetParam());
  const std::string first = (base / "first").string(), second = (base / "second").string();
  fs::remove_all(base);
  models::HfExportProvenance provenance;
  provenance.source = "model.hf_dir=" + ModelDir();
  ASSERT_TRUE(Load(ModelDir()).ExportHf(first, provenance).ok());
  provenance.source = "model.hf_dir=" + first;
  ASSERT_TRUE(Load(first).ExportHf(second, provenance).ok());
  for (const std::string name : {"config.json", "model.safetensors"}) {
    EXPECT_EQ(testing::FileBytes(fs::path(second) / name),
              testing::FileBytes(fs::path(first) / name))
        << name;
  }
  const auto json_of = [](const fs::path& path) {
    return nlohmann::json::parse(testing::FileBytes(path));
  };
  const bool v5 = json_of(fs::path(ModelDir()) / "config.json").contains("rope_parameters");
  const nlohmann::json exported = json_of(fs::path(first) / "config.json");
  EXPECT_EQ(exported.contains("rope_parameters"), v5) << exported.dump();
  EXPECT_EQ(exported.contains("rope_theta"), !v5) << exported.dump();
  absl::StatusOr<models::LlamaConfig> source = models::LlamaConfigFromHfDirectory(ModelDir());
  absl::StatusOr<models::LlamaConfig> round_trip = models::LlamaConfigFromHfDirectory(first);
  ASSERT_TRUE(source.ok() && round_trip.ok());
  EXPECT_TRUE(source->rope == round_trip->rope);
  EXPECT_EQ(round_trip->max_position_embeddings, source->max_position_embeddings);
}

INSTANTIATE_TEST_SUITE_P(Scalings, RopeScalingParity,
                         ::testing::Values("theta", "linear", "yarn", "yarn_mscale", "longrope",
                                           "llama3", "ssa_yarn", "dynamic"));

// Dynamic NTK decoded as transformers' generation does it: 24 tokens in one call (within the
// original length 32: the unscaled frequencies), then one token per call up to 128, each call
// beyond the original length with the base raised for its own length, the cache keeping every key
// as the call that appended it rotated it. Every call's logits within 2e-5 relative (105 calls of
// f32 decoding; the largest difference seen is 1.02e-5, at the call appending position 114).
TEST(RopeScalingParityDecoding, DynamicNtkPerCallAsTransformersGenerates) {
  const std::string dir = kFixtures + "dynamic/model";
  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  models::LlamaModel model(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE(model.LoadHfCheckpoint(*checkpoint).ok());
  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixtures + "dynamic/logits.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const Tensor tokens = testing::Cast(*golden->Read("input_ids"), DType::kI32);  // [1, 128]
  const Tensor expected = *golden->Read("decode_logits", DType::kF64);           // [1, 128, V]
  const int64_t length = tokens.numel(), prompt = 24, vocab = expected.dim(2);
  absl::StatusOr<models::LlamaDecoder> decoder = models::LlamaDecoder::Create(model, length);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const int32_t* ids = tokens.data<int32_t>();
  const Tensor rows = expected.View({length, vocab});
  for (int64_t begin = 0; begin < length;) {
    const int64_t end = begin == 0 ? prompt : begin + 1;
    absl::StatusOr<Tensor> logits = decoder->Append(std::vector<int32_t>(ids + begin, ids + end));
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_TRUE(
        testing::AllClose(*logits, rows.Slice(begin, end), 2 * testing::kF32RelTol,
                          absl::StrCat("logits of the call appending [", begin, ", ", end, ")")));
    begin = end;
  }
}

}  // namespace
}  // namespace kelvin
