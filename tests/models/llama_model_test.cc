// Llama model properties beyond HF parity: gradient accumulation equals the big batch (f64),
// export then import is bit-identical, and config/checkpoint errors are clear.
#include "models/llama/llama_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/io/hf_checkpoint.h"
#include "core/ops/cross_entropy.h"
#include "core/optim/adamw_optimizer.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

models::LlamaConfig TinyConfig() {
  models::LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 50;
  c.max_position_embeddings = 64;
  c.rope.theta = 10000.0;
  c.rope.type = ops::RopeType::kLlama3;
  c.rope.original_max_position = 8;
  return c;
}

// Positions 0..T-1 for every row.
Tensor Arange(int64_t rows, int64_t t) {
  Tensor p = Tensor::Empty({rows, t}, DType::kI32);
  for (int64_t i = 0; i < rows * t; ++i) p.data<int32_t>()[i] = static_cast<int32_t>(i % t);
  return p;
}

// Runs forward/backward on rows [begin, end) with the loss normalised by the whole batch's
// number of labelled tokens, as the trainer does for each micro-batch.
void AccumulateRows(models::LlamaModel& model, const Tensor& tokens, const Tensor& labels,
                    int64_t begin, int64_t end, int64_t labelled) {
  const Context ctx = Context::Cpu();
  const Tensor rows = tokens.Slice(begin, end);
  Tensor& logits = model.Forward(ctx, rows, Arange(end - begin, tokens.dim(1)));
  Tensor loss = Tensor::Empty({logits.dim(0)}, DType::kF64);
  ops::SoftmaxCrossEntropy(ctx, logits, labels.Slice(begin, end).View({-1}),
                           1.0 / static_cast<double>(labelled), loss);
  model.Backward(ctx, logits);
}

TEST(LlamaModel, FourMicroBatchesOfTwoEqualOneBatchOfEight) {
  const int64_t b = 8, t = 6;
  const Tensor tokens = testing::RandomInts({b, t}, DType::kI32, 1, 0, 49);
  Tensor labels = testing::RandomInts({b, t}, DType::kI32, 2, 0, 49);
  for (int64_t i = 0; i < b * t; i += 5) labels.data<int32_t>()[i] = ops::kIgnoreIndex;
  const int64_t labelled = ops::CountNonIgnored(Context::Cpu(), labels.View({-1}));

  models::LlamaModel whole(TinyConfig(), DType::kF64), split(TinyConfig(), DType::kF64);
  whole.InitRandom(7);
  split.InitRandom(7);
  AccumulateRows(whole, tokens, labels, 0, b, labelled);
  for (int64_t m = 0; m < 4; ++m) AccumulateRows(split, tokens, labels, 2 * m, 2 * m + 2, labelled);
  for (size_t i = 0; i < whole.parameters().entries().size(); ++i) {
    const auto& e = whole.parameters().entries()[i];
    EXPECT_TRUE(testing::AllClose(split.parameters().entries()[i].grad, e.grad, testing::kF64RelTol,
                                  "accumulated grad of " + e.name));
  }
  const Context ctx = Context::Cpu();
  AdamWOptimizer opt_whole(whole.parameters(), {}), opt_split(split.parameters(), {});
  opt_whole.Step(ctx, 1e-2);
  opt_split.Step(ctx, 1e-2);
  for (ParamGroup g : {ParamGroup::kDecay, ParamGroup::kNoDecay}) {
    EXPECT_TRUE(testing::AllClose(split.parameters().values(g), whole.parameters().values(g),
                                  testing::kF64RelTol, "parameters after the update"));
  }
}

TEST(LlamaModel, ExportThenImportIsBitIdentical) {
  models::LlamaModel model(TinyConfig(), DType::kF32);
  model.InitRandom(3);
  const std::string dir = ::testing::TempDir() + "/kelvin_export_roundtrip";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(model.ExportHf(dir).ok());
  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(dir);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->num_key_value_heads, 2);
  EXPECT_EQ(config->rope.type, ops::RopeType::kLlama3);
  models::LlamaModel imported(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  ASSERT_TRUE(imported.LoadHfCheckpoint(*checkpoint).ok());
  for (size_t i = 0; i < model.parameters().entries().size(); ++i) {
    const auto& e = model.parameters().entries()[i];
    EXPECT_TRUE(testing::BitIdentical(imported.parameters().entries()[i].value, e.value, e.name));
  }
}

TEST(LlamaConfig, HfJsonErrorsNameTheFieldAndValue) {
  auto parse = [](const std::string& text) {
    return models::LlamaConfigFromHfJson(text, "m/config.json").status();
  };
  // Not JSON at all: the position and what is wrong, whatever the flaw.
  EXPECT_THAT(Message(parse("{")),
              HasSubstr("m/config.json: not well-formed JSON at line 1, column 2"));
  EXPECT_THAT(Message(parse("{\n  \"hidden_size\": NaN}")),
              HasSubstr("m/config.json: not well-formed JSON at line 2, column 18"));
  EXPECT_THAT(Message(parse(R"({"rms_norm_eps": Infinity})")),
              HasSubstr("not well-formed JSON at line 1, column 18"));
  EXPECT_THAT(Message(parse(R"({"rope_theta": 1e400})")),
              HasSubstr("number overflow parsing '1e400'"));
  EXPECT_THAT(Message(parse("{\"model_type\": \"ll\xff\"}")), HasSubstr("ill-formed UTF-8"));
  EXPECT_THAT(Message(parse("[1, 2]")), HasSubstr("m/config.json: is a JSON array, not an object"));
  EXPECT_THAT(Message(parse(R"({"a": 1, "a": 2})")), HasSubstr("key \"a\" appears twice"));
  // Integers beyond int64 are named as written, not wrapped.
  EXPECT_THAT(Message(parse(R"({"hidden_size": 18446744073709551615})")),
              HasSubstr("field \"hidden_size\" is 18446744073709551615, expected an integer below "
                        "2^63"));
  EXPECT_THAT(Message(parse(R"({"hidden_size": 64})")),
              HasSubstr("m/config.json: required field \"intermediate_size\" is missing"));
  EXPECT_THAT(Message(parse(R"({"hidden_size": "64"})")),
              HasSubstr("field \"hidden_size\" is \"64\", expected an integer"));
  EXPECT_THAT(Message(parse(R"({"model_type": "mistral"})")),
              HasSubstr("model_type = mistral is not supported"));
  EXPECT_THAT(Message(parse(R"({"attention_bias": true})")),
              HasSubstr("attention_bias = true is not supported"));
}

// Sizes beyond the stated limits (llama_config.h) are errors before anything is allocated or
// looped over, whatever their source; so is a llama3 RoPE scaling that the RoPE op cannot take.
TEST(LlamaConfig, SizesBeyondTheLimitsAndBadRopeScalingAreErrors) {
  const auto with = [](auto edit) {
    models::LlamaConfig c = TinyConfig();
    edit(c);
    return Message(models::ValidateLlamaConfig(c, "m/config.json"));
  };
  EXPECT_THAT(with([](models::LlamaConfig& c) { c.vocab_size = int64_t{1} << 40; }),
              HasSubstr("the model's architecture (m/config.json) is invalid: "
                        "model.vocab_size=1099511627776: must be in [1, 16777216]"));
  EXPECT_THAT(with([](models::LlamaConfig& c) { c.hidden_size = int64_t{1} << 62; }),
              HasSubstr("model.hidden_size=4611686018427387904: must be in [1, 131072]"));
  EXPECT_THAT(with([](models::LlamaConfig& c) { c.num_layers = int64_t{1} << 50; }),
              HasSubstr("model.num_hidden_layers=1125899906842624 (model.architecture.num_layers "
                        "in a job): must be in [1, 4096]"));
  EXPECT_THAT(with([](models::LlamaConfig& c) { c.max_position_embeddings = -5; }),
              HasSubstr("model.max_position_embeddings=-5: must be in [1, 134217728]"));
  for (const double factor : {0.0, -2.0, 0.5, std::nan("")}) {
    EXPECT_THAT(with([&](models::LlamaConfig& c) {
                  c.rope.type = ops::RopeType::kLlama3;
                  c.rope.factor = factor;
                }),
                HasSubstr("model.rope_scaling.factor="))
        << factor;
  }
  // The same rule reads config.json's rope_scaling (it aborted in the RoPE op before).
  const absl::StatusOr<models::LlamaConfig> parsed = models::LlamaConfigFromHfJson(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 300,
          "rope_scaling": {"rope_type": "llama3", "factor": -1, "low_freq_factor": 1,
                           "high_freq_factor": 4, "original_max_position_embeddings": 8192}})",
      "m/config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(Message(models::ValidateLlamaConfig(*parsed, "m/config.json")),
              HasSubstr("model.rope_scaling.factor=-1: must be >= 1"));
}

// RoPE settings of the wrong type, and a factor that default RoPE would ignore, are errors naming
// the field and what it is; before, they left RoPE at its default silently. A factor of 1 scales
// nothing and stays accepted.
TEST(LlamaConfig, RopeSettingsOfTheWrongTypeAreErrors) {
  const auto parse = [](const std::string& rope) {
    return Message(
        models::LlamaConfigFromHfJson(absl::StrCat(R"({"hidden_size": 64, "intermediate_size": 128,
                                        "num_hidden_layers": 2, "num_attention_heads": 4,
                                        "vocab_size": 300, )",
                                                   rope, "}"),
                                      "m/config.json")
            .status());
  };
  EXPECT_THAT(parse(R"("rope_scaling": "llama3")"),
              HasSubstr("m/config.json: field \"rope_scaling\" is \"llama3\", expected an object "
                        "(e.g. {\"rope_type\": \"llama3\", \"factor\": 8.0, ...}) or null, not a "
                        "string"));
  EXPECT_THAT(parse(R"("rope_parameters": 8)"),
              HasSubstr("field \"rope_parameters\" is 8, expected an object"));
  EXPECT_THAT(parse(R"("rope_theta": "500000")"),
              HasSubstr("field \"rope_theta\" is \"500000\", expected a number, not a string"));
  EXPECT_THAT(parse(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4,
                      "factor": "8", "low_freq_factor": 1, "high_freq_factor": 4,
                      "original_max_position_embeddings": 64})"),
              HasSubstr("m/config.json rope_parameters: field \"factor\" is \"8\", expected a "
                        "number, not a string"));
  EXPECT_THAT(parse(R"("rope_scaling": {"rope_type": "default", "factor": 8.0})"),
              HasSubstr("m/config.json rope_scaling: factor 8 with rope_type \"default\" would be "
                        "ignored"));
  EXPECT_THAT(parse(R"("rope_scaling": {"type": "default", "factor": "2"})"),
              HasSubstr("field \"factor\" is \"2\", expected a number, not a string"));
  EXPECT_EQ(parse(R"("rope_scaling": {"rope_type": "default", "factor": 1.0})"), "");
  EXPECT_EQ(parse(R"("rope_scaling": null)"), "");
  // Both layouts, or rope_theta twice, must agree: else the reader decides the model.
  const std::string yarn = R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4,
                              "factor": 8, "original_max_position_embeddings": 64})";
  EXPECT_THAT(parse(yarn + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 2})"),
              HasSubstr("m/config.json: rope_parameters.factor is 8 but rope_scaling.factor is 2: "
                        "transformers 5 reads rope_parameters"));
  EXPECT_THAT(parse(yarn + R"(, "rope_theta": 500000)"),
              HasSubstr("rope_parameters.rope_theta is 10000.0 but rope_theta is 500000"));
  EXPECT_EQ(parse(yarn + R"(, "rope_theta": 1e4, "rope_scaling": {"rope_type": "yarn",
                             "factor": 8})"),
            "");
}

// transformers' dynamic NTK scaling is read with max_position_embeddings as its original length (a
// different original_max_position_embeddings is an error); longrope without its lists, a list
// of the wrong length or with a non-number, and a partial rotary factor are errors naming them;
// yarn's optional fields are read as given (unset stays unset), LongRoPE's factor defaults to
// max_position_embeddings / original as in transformers.
TEST(LlamaConfig, EveryTransformersScalingIsRead) {
  const auto parse = [](const std::string& rope) {
    return models::LlamaConfigFromHfJson(
        absl::StrCat(R"({"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                        "num_attention_heads": 2, "vocab_size": 30, "max_position_embeddings": 64,
                        )",
                     rope, "}"),
        "m/config.json");
  };
  absl::StatusOr<models::LlamaConfig> dynamic =
      parse(R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})");
  ASSERT_TRUE(dynamic.ok()) << dynamic.status();
  EXPECT_EQ(dynamic->rope.type, ops::RopeType::kDynamic);
  EXPECT_EQ(dynamic->rope.factor, 2.0);
  EXPECT_EQ(dynamic->rope.original_max_position, 64);  // max_position_embeddings
  EXPECT_THAT(Message(parse(R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0,
                               "original_max_position_embeddings": 16})")
                          .status()),
              HasSubstr("m/config.json rope_scaling: original_max_position_embeddings=16 with "
                        "rope_type \"dynamic\": transformers ignores it"));
  EXPECT_THAT(Message(parse(R"("rope_scaling": {"rope_type": "dynamic"})").status()),
              HasSubstr("factor"));
  EXPECT_THAT(Message(parse(R"("rope_scaling": {"rope_type": "longrope",
                               "original_max_position_embeddings": 16})")
                          .status()),
              HasSubstr("required field \"short_factor\" is missing"));
  EXPECT_THAT(Message(parse(R"("rope_scaling": {"rope_type": "longrope", "short_factor": [1, "a"],
                               "long_factor": [1, 2]})")
                          .status()),
              HasSubstr("field \"short_factor\" holds \"a\", expected numbers only"));
  EXPECT_THAT(Message(parse(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                               "partial_rotary_factor": 0.5})")
                          .status()),
              HasSubstr("partial_rotary_factor 0.5 is not supported"));

  absl::StatusOr<models::LlamaConfig> longrope =
      parse(R"("rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 16,
               "short_factor": [1, 2, 3], "long_factor": [1, 2, 3, 4]})");
  ASSERT_TRUE(longrope.ok()) << longrope.status();
  EXPECT_EQ(longrope->rope.factor, 4.0);  // 64 / 16
  EXPECT_EQ(longrope->hf_rope_form, models::HfRopeForm::kRopeScaling);
  EXPECT_THAT(
      Message(models::ValidateLlamaConfig(*longrope, "m/config.json")),
      HasSubstr("model.rope_scaling.short_factor: has 3 numbers, must have head_dim / 2 = 4"));

  absl::StatusOr<models::LlamaConfig> yarn =
      parse(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4,
               "original_max_position_embeddings": 16, "beta_fast": 8, "truncate": false})");
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_EQ(yarn->rope.type, ops::RopeType::kYarn);
  EXPECT_EQ(yarn->rope.beta_fast, 8.0);
  EXPECT_FALSE(yarn->rope.beta_slow.has_value());
  EXPECT_EQ(yarn->rope.truncate, false);
  EXPECT_EQ(yarn->hf_rope_form, models::HfRopeForm::kRopeParameters);
  EXPECT_TRUE(models::ValidateLlamaConfig(*yarn, "m/config.json").ok());
}

TEST(LlamaConfig, ValidationListsEveryProblem) {
  models::LlamaConfig c = TinyConfig();
  c.num_attention_heads = 32;
  c.num_key_value_heads = 6;
  c.head_dim = 7;
  const absl::Status status = models::ValidateLlamaConfig(c);
  EXPECT_THAT(Message(status),
              HasSubstr("model.num_key_value_heads=6 does not divide num_attention_heads=32"));
  EXPECT_THAT(Message(status), HasSubstr("model.head_dim=7: must be even"));
  EXPECT_TRUE(models::ValidateLlamaConfig(TinyConfig()).ok());
  for (const std::string& preset : models::LlamaPresetNames()) {
    absl::StatusOr<models::LlamaConfig> p = models::LlamaPreset(preset);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(models::ValidateLlamaConfig(*p).ok()) << preset;
  }
  EXPECT_THAT(Message(models::LlamaPreset("llama2").status()),
              HasSubstr("model.preset=\"llama2\" is not a preset; known presets: llama3-8b"));
  // The presets' parameter counts are Meta's models': Llama-3-8B 8,030,261,248; Llama-3.2-1B
  // 1,235,814,400 and -3B 3,212,749,824 (embeddings tied to the LM head).
  EXPECT_EQ(models::LlamaPreset("llama3-8b")->NumParameters(), 8030261248);
  EXPECT_EQ(models::LlamaPreset("llama3.2-1b")->NumParameters(), 1235814400);
  EXPECT_EQ(models::LlamaPreset("llama3.2-3b")->NumParameters(), 3212749824);
  EXPECT_EQ(models::LlamaPreset("llama3.2-3b")->head_dim, 128);
}

TEST(LlamaModel, MissingOrMisshapenCheckpointTensorsAreClearErrors) {
  models::LlamaModel model(TinyConfig(), DType::kF32);
  model.InitRandom(1);
  const std::string dir = ::testing::TempDir() + "/kelvin_bad_checkpoint";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(model.ExportHf(dir).ok());
  models::LlamaConfig bigger = TinyConfig();
  bigger.num_layers = 3;
  models::LlamaModel three_layers(bigger, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_THAT(
      Message(three_layers.LoadHfCheckpoint(*checkpoint)),
      HasSubstr("holds the weights of 2 layers but the model config has "
                "num_hidden_layers=3 (no tensor \"model.layers.2.input_layernorm.weight\")"));
  models::LlamaConfig wider = TinyConfig();
  wider.intermediate_size = 64;
  models::LlamaModel wide(wider, DType::kF32);
  EXPECT_THAT(Message(wide.LoadHfCheckpoint(*checkpoint)),
              HasSubstr("tensor \"model.layers.0.mlp.gate_proj.weight\" has shape [48, 32] but "
                        "the model config (intermediate_size=64) gives it [64, 32]"));
  EXPECT_THAT(Message(models::LlamaConfigFromHfDirectory(dir + "/nowhere").status()),
              HasSubstr("cannot read " + dir + "/nowhere/config.json"));
}

}  // namespace
}  // namespace kelvin
