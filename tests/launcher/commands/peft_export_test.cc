// LoRA exports against peft (tools/check_peft_export.py's fixture, tests/fixtures/peft/<case>: a
// LoRA job and the adapter its training exported, which peft loaded over the tiny base): Kelvin,
// given that adapter's tensors over the base, computes the logits peft did; its adapter export is
// the fixture's files byte for byte; its merged export computes the same logits as a plain model.
// Beside them, the export formats' errors, and kelvin convert of a LoRA job's checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/io/hf_checkpoint.h"
#include "core/io/safetensors.h"
#include "launcher/commands/convert_command.h"
#include "launcher/config/job_config.h"
#include "models/llama/hf_modeling_code.h"
#include "models/llama/llama_model.h"
#include "models/llama/peft_adapter_directory.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"
#include "training/job/job_setup.h"
#include "training/trainer.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/peft/";
const std::string kBase = std::string(KELVIN_FIXTURES_DIR) + "/llama_tiny/model";

fs::path FreshDirectory(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  return dir;
}

// The fixture's job over the tiny base, its model holding the base and the fixture adapter's
// tensors (peft's names without kPeftTensorPrefix are Kelvin's).
struct FixtureModel {
  config::JobConfig job;
  std::unique_ptr<models::LlamaModel> model;
};

FixtureModel LoadFixture(const std::string& name) {
  FixtureModel fixture;
  absl::StatusOr<config::JobConfig> job =
      LoadJobConfig(kFixtures + name + "/job.textproto", {"model.hf_dir=\"" + kBase + "\""},
                    JobUse::kForwardOnly);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return fixture;
  fixture.job = *job;
  absl::StatusOr<models::LlamaConfig> arch = training::ResolveModelArchitecture(job->model());
  EXPECT_TRUE(arch.ok()) << arch.status();
  absl::StatusOr<io::HfCheckpoint> base = io::HfCheckpoint::Open(kBase);
  EXPECT_TRUE(base.ok()) << base.status();
  if (!arch.ok() || !base.ok()) return fixture;
  fixture.model = std::make_unique<models::LlamaModel>(*arch, DType::kF32);
  EXPECT_TRUE(fixture.model->LoadHfCheckpoint(*base).ok());
  absl::StatusOr<io::SafetensorsFile> adapter = io::SafetensorsFile::Open(
      kFixtures + name + "/adapter/" + std::string(models::kPeftAdapterWeightsName));
  EXPECT_TRUE(adapter.ok()) << adapter.status();
  if (!adapter.ok()) return fixture;
  int assigned = 0;
  for (const io::SafetensorsEntry& entry : adapter->entries()) {
    EXPECT_TRUE(entry.name.starts_with(models::kPeftTensorPrefix)) << entry.name;
    const std::string kelvin_name =
        entry.name.substr(std::string_view(models::kPeftTensorPrefix).size());
    absl::StatusOr<Tensor> value = adapter->Read(entry.name, DType::kF32);
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok()) continue;
    fixture.model->parameters().Assign(kelvin_name, *value);
    ++assigned;
  }
  EXPECT_GT(assigned, 0);
  return fixture;
}

Tensor& ForwardOnFixtureBatch(models::LlamaModel& model, const io::SafetensorsFile& golden) {
  const Tensor tokens = testing::Cast(*golden.Read("input_ids"), DType::kI32);        // [2, 24]
  const Tensor positions = testing::Cast(*golden.Read("position_ids"), DType::kI32);  // [2, 24]
  return model.Forward(Context::Cpu(), tokens, positions);                            // [2 * 24, V]
}

class PeftExportFixture : public ::testing::TestWithParam<std::string> {};

// The logits peft computed with the adapter over the base, within 1e-5.
TEST_P(PeftExportFixture, KelvinGivesPeftsLogits) {
  FixtureModel fixture = LoadFixture(GetParam());
  ASSERT_NE(fixture.model, nullptr);
  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixtures + GetParam() + "/logits.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const Tensor expected = *golden->Read("logits", DType::kF64);  // [2, 24, V]
  Tensor& logits = ForwardOnFixtureBatch(*fixture.model, *golden);
  EXPECT_TRUE(
      testing::AllClose(logits, expected.View(logits.shape()), testing::kF32RelTol, "logits"));
}

// Kelvin's adapter export of those tensors is the fixture's directory: the same weights file byte
// for byte, the same adapter_config.json (but the base's path, which is the job's model.hf_dir),
// and with SSA the same config.json and modeling code.
TEST_P(PeftExportFixture, TheAdapterExportIsTheFixturesFiles) {
  FixtureModel fixture = LoadFixture(GetParam());
  ASSERT_NE(fixture.model, nullptr);
  const fs::path dir = FreshDirectory("kelvin_peft_reexport_" + GetParam());
  ASSERT_TRUE(fixture.model
                  ->ExportHf(dir.string(), training::ExportProvenanceOf(fixture.job),
                             {.format = models::ExportFormat::kPeftAdapter})
                  .ok());
  const fs::path expected = kFixtures + GetParam() + "/adapter";
  const std::string weights(models::kPeftAdapterWeightsName);
  EXPECT_EQ(testing::FileBytes(dir / weights), testing::FileBytes(expected / weights))
      << "run tools/check_peft_export.py BUILD/launcher/kelvin --write-fixture if the format "
      << "changed on purpose: it checks the new files in peft";
  const std::string config_name(models::kPeftAdapterConfigName);
  nlohmann::json written = nlohmann::json::parse(testing::FileBytes(dir / config_name));
  nlohmann::json golden = nlohmann::json::parse(testing::FileBytes(expected / config_name));
  EXPECT_EQ(written["base_model_name_or_path"], kBase);
  written.erase("base_model_name_or_path");
  golden.erase("base_model_name_or_path");
  EXPECT_EQ(written, golden);
  const bool ssa = fixture.model->config().ssa.has_value();
  EXPECT_EQ(fs::exists(dir / "config.json"), ssa);
  if (ssa) {
    EXPECT_EQ(testing::FileBytes(dir / "config.json"),
              testing::FileBytes(expected / "config.json"));
    for (const auto& [name, code] : models::SsaHfModelingFiles()) {
      EXPECT_EQ(testing::FileBytes(expected / name), code) << name << " changed since the fixture";
    }
  }
  fs::remove_all(dir);
}

// The merged export, read back as a model without adapters, computes peft's logits too.
TEST_P(PeftExportFixture, TheMergedExportGivesTheSameLogits) {
  FixtureModel fixture = LoadFixture(GetParam());
  ASSERT_NE(fixture.model, nullptr);
  const fs::path dir = FreshDirectory("kelvin_peft_merged_" + GetParam());
  ASSERT_TRUE(
      fixture.model->ExportHf(dir.string(), {}, {.format = models::ExportFormat::kMerged}).ok());
  absl::StatusOr<models::LlamaConfig> config = models::LlamaConfigFromHfDirectory(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->lora.has_value());
  EXPECT_EQ(config->ssa.has_value(), fixture.model->config().ssa.has_value());
  models::LlamaModel merged(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->TensorNames().size(), merged.parameters().entries().size())
      << "the merged export holds the LoRA matrices or lacks a tensor";
  ASSERT_TRUE(merged.LoadHfCheckpoint(*checkpoint).ok());
  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixtures + GetParam() + "/logits.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const Tensor expected = *golden->Read("logits", DType::kF64);
  Tensor& logits = ForwardOnFixtureBatch(merged, *golden);
  EXPECT_TRUE(
      testing::AllClose(logits, expected.View(logits.shape()), testing::kF32RelTol, "logits"));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PeftExportFixture, ::testing::Values("lora", "lora_ssa"));

// An export does not land beside the other format's files, and writes nothing when refused.
TEST(PeftExport, ADirectoryOfTheOtherFormatIsRefused) {
  FixtureModel fixture = LoadFixture("lora");
  ASSERT_NE(fixture.model, nullptr);
  const fs::path adapter = FreshDirectory("kelvin_peft_other_format");
  ASSERT_TRUE(
      fixture.model->ExportHf(adapter.string(), {}, {.format = models::ExportFormat::kPeftAdapter})
          .ok());
  const absl::Status merged =
      fixture.model->ExportHf(adapter.string(), {}, {.format = models::ExportFormat::kMerged});
  EXPECT_THAT(std::string(merged.message()),
              HasSubstr("holds a peft adapter (adapter_config.json): transformers would load"));
  EXPECT_FALSE(fs::exists(adapter / "model.safetensors"));
  EXPECT_TRUE(training::CheckExportDirectory("--out X", adapter.string(), fixture.job,
                                             models::ExportFormat::kPeftAdapter)
                  .ok())
      << "an adapter over an adapter replaces it";

  const fs::path model = FreshDirectory("kelvin_peft_other_format_model");
  ASSERT_TRUE(
      fixture.model->ExportHf(model.string(), {}, {.format = models::ExportFormat::kMerged}).ok());
  const absl::Status into_model =
      training::CheckExportDirectory("training.export_hf_dir=\"M\"", model.string(), fixture.job,
                                     models::ExportFormat::kPeftAdapter);
  EXPECT_THAT(std::string(into_model.message()),
              HasSubstr("training.export_hf_dir=\"M\" holds a model (model.safetensors)"));
  fs::remove_all(adapter);
  fs::remove_all(model);
}

// kelvin convert of a LoRA job's checkpoint (the trainable tensors alone): over the job's base,
// the adapter it writes is the one the training exported, byte for byte; merged, the model's
// logits are the trained model's; a peft adapter of a job without LoRA is refused by --format.
TEST(PeftExport, ConvertWritesTheTrainingsAdapterAndTheMergedModel) {
  const fs::path dir = FreshDirectory("kelvin_peft_convert");
  fs::create_directories(dir);
  // Token files of the base's vocabulary, one to train on and one held out.
  const auto write_tokens = [&dir](const std::string& name, uint64_t seed) {
    const Tensor tokens = testing::RandomInts({4096}, DType::kI32, seed, 4, 159);
    std::ofstream(dir / name, std::ios::binary)
        .write(static_cast<const char*>(tokens.raw_data()),
               static_cast<std::streamsize>(tokens.nbytes()));
    return (dir / name).string();
  };
  const std::string train_path = write_tokens("train.int32", 3);
  const std::string eval_path = write_tokens("eval.int32", 4);
  absl::StatusOr<config::JobConfig> job = LoadJobConfig(
      kFixtures + "lora/job.textproto",
      {"model.hf_dir=\"" + kBase + "\"", "data.token_file.path=\"" + train_path + "\"",
       "data.eval.token_file.path=\"" + eval_path + "\"", "training.steps=2",
       "training.eval_whole_set=false", "training.eval_steps=1",
       "checkpoint.dir=\"" + (dir / "checkpoints").string() + "\"", "checkpoint.interval_steps=2",
       "training.export_hf_dir=\"" + (dir / "adapter").string() + "\""});
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<training::Trainer>> trainer = training::Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const absl::Status ran = (*trainer)->Run();
  ASSERT_TRUE(ran.ok()) << ran;

  ConvertOptions options;
  options.format = config::ExportFormat::PEFT_ADAPTER;
  options.tokenizer = kBase;  // an adapter carries no tokenizer: refused, not ignored
  EXPECT_THAT(
      std::string(
          ConvertCheckpointToHf(*job, (dir / "converted").string(), options).status().message()),
      HasSubstr("this writes a peft adapter, which carries no tokenizer"));
  options.tokenizer = "";
  ASSERT_TRUE(ConvertCheckpointToHf(*job, (dir / "converted").string(), options).ok());
  for (const char* name : {models::kPeftAdapterWeightsName, models::kPeftAdapterConfigName}) {
    EXPECT_EQ(testing::FileBytes(dir / "converted" / name),
              testing::FileBytes(dir / "adapter" / name))
        << name;
  }
  options.format = config::ExportFormat::MERGED;
  ASSERT_TRUE(ConvertCheckpointToHf(*job, (dir / "merged").string(), options).ok());
  absl::StatusOr<models::LlamaConfig> config =
      models::LlamaConfigFromHfDirectory((dir / "merged").string());
  ASSERT_TRUE(config.ok()) << config.status();
  models::LlamaModel merged(*config, DType::kF32);
  const absl::StatusOr<io::HfCheckpoint> merged_files =
      io::HfCheckpoint::Open((dir / "merged").string());
  ASSERT_TRUE(merged_files.ok()) << merged_files.status();
  ASSERT_TRUE(merged.LoadHfCheckpoint(*merged_files).ok());
  // The adapters moved in 2 steps: the merged projection is not the base's.
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_FALSE(testing::BitIdentical(*merged_files->Read(q, DType::kF32),
                                     *io::HfCheckpoint::Open(kBase)->Read(q, DType::kF32), q));
  // One micro-batch of the job's shape: 2 rows of 32 tokens.
  const Tensor tokens = testing::RandomInts({2, 32}, DType::kI32, 5, 4, 159);
  Tensor positions = Tensor::Empty({2, 32}, DType::kI32);
  for (int64_t i = 0; i < 64; ++i) positions.data<int32_t>()[i] = static_cast<int32_t>(i % 32);
  const Tensor trained =
      testing::Cast((*trainer)->model().Forward(Context::Cpu(), tokens, positions), DType::kF64);
  EXPECT_TRUE(testing::AllClose(merged.Forward(Context::Cpu(), tokens, positions), trained,
                                testing::kF32RelTol, "merged logits"));

  // The full checkpoint's rules stand: an adapter needs LoRA.
  absl::StatusOr<config::JobConfig> plain =
      LoadJobConfig(testing::DemoJobPath(), {"checkpoint.dir=\"" + dir.string() + "/none\""},
                    JobUse::kForwardOnly);
  ASSERT_TRUE(plain.ok()) << plain.status();
  options.format = config::ExportFormat::PEFT_ADAPTER;
  const absl::StatusOr<int64_t> refused =
      ConvertCheckpointToHf(*plain, (dir / "refused").string(), options);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--format=PEFT_ADAPTER needs LoRA adapters (model.lora)"));
  EXPECT_FALSE(fs::exists(dir / "refused"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::launcher
