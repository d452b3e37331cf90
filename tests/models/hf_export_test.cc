// The Hugging Face directory an export writes (models/llama/hf_model_directory.h): every file with
// the source's token ids and tokenizer files, config.json true to the weights' dtype, the model
// card, and for SSA the modeling code and the "ssa" object; export -> import -> export is
// bit-identical file for file, SSA included; config.json's "ssa" object and token ids are parsed
// strictly, with errors naming the setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "models/llama/hf_modeling_code.h"
#include "models/llama/llama_model.h"
#include "nlohmann/json.hpp"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/files.h"

namespace kelvin {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kelvin_hf_export_" + name);
  fs::remove_all(dir);
  return dir.string();
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The tiny SSA Llama with every flag away from its default that keeps all tensors, non-zero
// read-outs and alphas (so the temperatures differ from 1) and Llama-3-like special tokens.
models::LlamaConfig SsaConfig() {
  models::LlamaConfig config = testing::TinySsaLlamaConfig(/*weight_sharing=*/false, true);
  config.ssa->temperature_clamp = ssa::TemperatureClamp{0.7, 1.8};
  config.ssa->alpha_init = -3.5;
  config.ssa->temperature_lr_scale = 4.0;
  config.special_tokens = {9, {10, 11}, 0};
  return config;
}

models::LlamaModel RandomModel(const models::LlamaConfig& config) {
  models::LlamaModel model(config, DType::kF32);
  model.InitRandom(5);
  std::mt19937_64 rng(6);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    if (e.group != ParamGroup::kTemperature) continue;
    Tensor master = e.master;
    for (int64_t i = 0; i < master.numel(); ++i) master.data<float>()[i] = normal(rng);
  }
  model.parameters().SyncModelCopy();
  return model;
}

models::HfExportProvenance Provenance(const std::string& source_dir) {
  models::HfExportProvenance provenance;
  provenance.source = "model.hf_dir=" + source_dir;
  provenance.source_dir = source_dir;
  provenance.job_name = "ssa_finetune";
  provenance.steps = 7;
  provenance.data = "token_file { path: \"/data/tokens.int32\" }";
  provenance.train_loss = 1.5;
  return provenance;
}

TEST(HfExport, TheDirectoryHoldsTheSourcesTokenizerAndIdsAndTheSsaModelingCode) {
  const std::string source = FreshDir("source");
  fs::create_directories(source);
  const std::vector<std::string> copied = {"tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "chat_template.jinja",
                                           "generation_config.json"};
  for (const std::string& name : copied)
    WriteText(fs::path(source) / name, "{\"of\": \"" + name + "\"}");
  const std::string dir = FreshDir("ssa");
  models::LlamaModel model = RandomModel(SsaConfig());
  ASSERT_TRUE(model.ExportHf(dir, Provenance(source)).ok());

  for (const std::string& name : copied) {
    EXPECT_EQ(testing::FileBytes(fs::path(dir) / name), "{\"of\": \"" + name + "\"}") << name;
  }
  for (const auto& [name, code] : models::SsaHfModelingFiles()) {
    EXPECT_EQ(testing::FileBytes(fs::path(dir) / name), code) << name;
  }
  const std::string config = testing::FileBytes(fs::path(dir) / "config.json");
  EXPECT_THAT(config, HasSubstr("\"architectures\": [\n    \"SsaLlamaForCausalLM\"\n  ]"));
  EXPECT_THAT(config,
              HasSubstr("\"AutoModelForCausalLM\": \"modeling_ssa_llama.SsaLlamaForCausalLM\""));
  EXPECT_THAT(config, HasSubstr("\"torch_dtype\": \"float32\""));
  const std::string card = testing::FileBytes(fs::path(dir) / "README.md");
  for (const std::string& line :
       {std::string("# ssa_finetune"), "| base model | model.hf_dir=" + source + " |",
        std::string("| steps trained | 7 |"), std::string("| last training loss | 1.500000 |"),
        std::string("| last evaluation loss | not recorded |"),
        std::string("| data | `token_file { path: \"/data/tokens.int32\" }` |"),
        std::string("weight sharing off, clamp [0.7, 1.8]"),
        std::string("trust_remote_code=True")}) {
    EXPECT_THAT(card, HasSubstr(line));
  }

  // What Kelvin reads back: the architecture, the SSA settings and the special tokens.
  absl::StatusOr<models::LlamaConfig> read = models::LlamaConfigFromHfDirectory(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->ssa.has_value());
  const ssa::SsaOptions& o = *read->ssa;
  EXPECT_FALSE(o.weight_sharing);
  EXPECT_TRUE(o.query_temperature && o.value_temperature && o.token_aware && o.position_aware);
  ASSERT_TRUE(o.temperature_clamp.has_value());
  EXPECT_EQ(o.temperature_clamp->lo, 0.7);
  EXPECT_EQ(o.temperature_clamp->hi, 1.8);
  EXPECT_EQ(o.alpha_init, -3.5);
  EXPECT_EQ(o.temperature_lr_scale, 4.0);
  EXPECT_EQ(read->special_tokens.bos, 9);
  EXPECT_EQ(read->special_tokens.eos, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(read->special_tokens.pad, 0);
  EXPECT_EQ(read->hidden_size, 16);
}

// An SSA export writes RoPE in transformers 5's layout (rope_parameters, rope_theta inside):
// AutoTokenizer reads config.json without the remote code, as a generic config, and fails on a
// 4.x rope_scaling of type llama3. A plain export keeps the 4.x layout every Llama stack reads.
// Both read back to the same RoPE.
TEST(HfExport, AnSsaExportWritesRopeAsTransformers5) {
  models::LlamaConfig config = SsaConfig();
  config.rope.theta = 50000.0;
  config.rope.type = ops::RopeType::kLlama3;
  // Read from a transformers 4 config.json: the plain export keeps that layout, the SSA one takes
  // transformers 5's.
  config.hf_rope_form = models::HfRopeForm::kRopeScaling;
  config.rope.factor = 4.0;
  config.rope.original_max_position = 32;
  for (const bool ssa : {true, false}) {
    SCOPED_TRACE(ssa ? "ssa" : "plain");
    models::LlamaConfig exported = config;
    if (!ssa) exported.ssa.reset();
    const std::string dir = FreshDir(ssa ? "rope_ssa" : "rope_plain");
    ASSERT_TRUE(RandomModel(exported).ExportHf(dir, models::HfExportProvenance{}).ok());
    const nlohmann::json json =
        nlohmann::json::parse(testing::FileBytes(fs::path(dir) / "config.json"));
    EXPECT_EQ(json.contains("rope_parameters"), ssa);
    EXPECT_EQ(json.contains("rope_scaling"), !ssa);
    EXPECT_EQ(json.contains("rope_theta"), !ssa);
    const nlohmann::json& rope = json[ssa ? "rope_parameters" : "rope_scaling"];
    EXPECT_EQ(rope["rope_type"], "llama3");
    EXPECT_EQ(rope["factor"], 4.0);
    EXPECT_EQ(rope.value("rope_theta", 0.0), ssa ? 50000.0 : 0.0);  // 4.x: top level
    absl::StatusOr<models::LlamaConfig> read = models::LlamaConfigFromHfDirectory(dir);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->rope.theta, 50000.0);
    EXPECT_EQ(read->rope.type, ops::RopeType::kLlama3);
    EXPECT_EQ(read->rope.factor, 4.0);
    EXPECT_EQ(read->rope.original_max_position, 32);
  }
}

TEST(HfExport, AVanillaExportIsPlainLlamaWithAGenerationConfigOfItsIds) {
  models::LlamaConfig config = SsaConfig();
  config.ssa.reset();
  config.vocab_size = 128256;
  config.special_tokens = {128000, {128001}, std::nullopt};
  const std::string dir = FreshDir("vanilla");
  models::LlamaModel model(config, DType::kF32);
  model.InitRandom(1);
  models::HfExportProvenance provenance;  // a preset: nothing to copy
  provenance.source = "model.preset=tiny";
  ASSERT_TRUE(model.ExportHf(dir, provenance).ok());
  const std::string json = testing::FileBytes(fs::path(dir) / "config.json");
  EXPECT_THAT(json, HasSubstr("\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]"));
  EXPECT_THAT(json, HasSubstr("\"model_type\": \"llama\""));
  EXPECT_THAT(json, HasSubstr("\"bos_token_id\": 128000"));
  EXPECT_THAT(json, HasSubstr("\"eos_token_id\": 128001"));
  EXPECT_THAT(json, Not(HasSubstr("auto_map")));
  EXPECT_THAT(json, Not(HasSubstr("pad_token_id")));
  EXPECT_EQ(testing::FileBytes(fs::path(dir) / "generation_config.json"),
            "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": "
            "128001\n}\n");
  EXPECT_FALSE(fs::exists(fs::path(dir) / "modeling_ssa_llama.py"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "tokenizer.json"));
  EXPECT_THAT(testing::FileBytes(fs::path(dir) / "README.md"), HasSubstr("Llama (vanilla)"));
}

TEST(HfExport, Bf16WeightsAreNamedInConfigJson) {
  const std::string json = models::LlamaConfigToHfJson(SsaConfig(), DType::kBF16);
  EXPECT_THAT(json, HasSubstr("\"torch_dtype\": \"bfloat16\""));
  EXPECT_THAT(json, HasSubstr("\"dtype\": \"bfloat16\""));
}

TEST(HfExport, ExportImportExportIsBitIdenticalFileForFile) {
  const std::string source = FreshDir("roundtrip_source");
  fs::create_directories(source);
  WriteText(fs::path(source) / "tokenizer.json", "{\"model\": {}}");
  const std::string first = FreshDir("roundtrip_first"), second = FreshDir("roundtrip_second");
  models::LlamaModel model = RandomModel(SsaConfig());
  ASSERT_TRUE(model.ExportHf(first, Provenance(source)).ok());

  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(first);
  ASSERT_TRUE(config.ok()) << config.status();
  models::LlamaModel imported(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(first);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE(imported.LoadHfCheckpoint(*checkpoint).ok());
  ASSERT_TRUE(imported.ExportHf(second, Provenance(first)).ok());  // the export as the source

  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(first)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"README.md", "config.json", "configuration_ssa_llama.py",
                                      "generation_config.json", "model.safetensors",
                                      "modeling_ssa_llama.py", "tokenizer.json"}));
  for (const std::string& name : names) {
    if (name == "README.md") continue;  // names its source, which differs
    EXPECT_EQ(testing::FileBytes(fs::path(second) / name),
              testing::FileBytes(fs::path(first) / name))
        << name;
  }
}

absl::Status Parse(const std::string& extra) {
  return models::LlamaConfigFromHfJson(
             "{\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 1, "
             "\"num_attention_heads\": 2, \"vocab_size\": 12" +
                 extra + "}",
             "/m/config.json")
      .status();
}

TEST(HfConfigJson, TheSsaObjectAndTokenIdsAreParsedStrictly) {
  EXPECT_TRUE(Parse(", \"model_type\": \"ssa_llama\", \"ssa\": {}").ok());
  EXPECT_TRUE(Parse(", \"eos_token_id\": [2, 3], \"bos_token_id\": null").ok());
  EXPECT_THAT(std::string(Parse(", \"model_type\": \"ssa_llama\"").message()),
              HasSubstr("/m/config.json: model_type \"ssa_llama\" needs an \"ssa\" object"));
  EXPECT_THAT(
      std::string(
          Parse(", \"model_type\": \"ssa_llama\", \"ssa\": {\"key_temperature\": true}").message()),
      HasSubstr("/m/config.json \"ssa\": unknown setting \"key_temperature\"; known: "
                "query_temperature, value_temperature"));
  EXPECT_THAT(
      std::string(
          Parse(", \"model_type\": \"ssa_llama\", \"ssa\": {\"token_aware\": 1}").message()),
      HasSubstr("field \"token_aware\" is 1, expected true or false"));
  EXPECT_THAT(std::string(Parse(", \"model_type\": \"ssa_llama\", \"ssa\": "
                                "{\"temperature_clamp\": {\"lo\": 0.9}}")
                              .message()),
              HasSubstr("temperature_clamp: required field \"hi\" is missing"));
  EXPECT_THAT(std::string(Parse(", \"eos_token_id\": \"</s>\"").message()),
              HasSubstr("field \"eos_token_id\" is \"</s>\", expected a token id or a list"));
  EXPECT_THAT(std::string(Parse(", \"model_type\": \"mistral\"").message()),
              HasSubstr("\"llama\" or \"ssa_llama\""));
  // Ids outside the vocabulary are the architecture's problem, named with the field.
  absl::StatusOr<models::LlamaConfig> outside = models::LlamaConfigFromHfJson(
      "{\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 2, \"vocab_size\": 12, \"eos_token_id\": [2, 12]}",
      "/m/config.json");
  ASSERT_TRUE(outside.ok());
  EXPECT_THAT(std::string(models::ValidateLlamaConfig(*outside).message()),
              HasSubstr("eos_token_id=12 is not a token of the vocabulary [0, 12)"));
}

}  // namespace
}  // namespace kelvin
