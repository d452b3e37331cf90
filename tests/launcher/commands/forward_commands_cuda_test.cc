// The forward-only commands with --device cuda (every case skips without a GPU, saying why), on a
// random SSA model directory the CUDA attention runs (head dim 64): `kelvin generate`'s greedy
// tokens are the f32 CPU run's where the margins allow (tests/models/greedy_margin.h), `eval
// --data` scores a corpus to the CPU's loss within the bf16 model tolerance, and `eval --needle`
// runs its grid with the temperature histograms (counted on the host from the device's values)
// matching the CPU's.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "data/corpus/token_file.h"
#include "inference/corpus_score.h"
#include "inference/text_generation.h"
#include "launcher/commands/inference_options.h"
#include "launcher/commands/needle_command.h"
#include "tests/models/greedy_margin.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/backends.h"
#include "tests/testing/tolerance.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;

// A random SSA model (read-outs and alphas normal(0, 0.5): temperatures away from 1) of the
// CUDA-sized config with `vocab` tokens, exported to a fresh directory named `name`.
std::string ModelDirectory(const std::string& name, int64_t vocab) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  models::LlamaConfig config = testing::CudaSizedSsaLlamaConfig(true, true);
  config.vocab_size = vocab;
  models::LlamaModel model(config, DType::kF32);
  model.InitRandom(31);
  std::mt19937_64 rng(32);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    if (e.group != ParamGroup::kTemperature) continue;
    for (int64_t i = 0; i < e.value.numel(); ++i) e.value.data<float>()[i] = normal(rng);
  }
  EXPECT_TRUE(model.ExportHf(dir.string()).ok());
  return dir.string();
}

// --device cuda's placement for `job`.
training::TrainingPlacement OnTheGpu(const config::JobConfig& job) {
  absl::StatusOr<training::TrainingPlacement> placement =
      inference::ResolveInferencePlacement(job, InferenceDevice::kCuda, 0);
  EXPECT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement.value_or(training::TrainingPlacement{}).dtype, DType::kBF16);
  return placement.value_or(training::TrainingPlacement{});
}

std::vector<std::vector<int32_t>> GeneratedTokens(const std::vector<std::string>& lines) {
  std::vector<std::vector<int32_t>> tokens;
  for (const std::string& line : lines) tokens.push_back(nlohmann::json::parse(line)["tokens"]);
  return tokens;
}

TEST(ForwardCommandsCuda, GenerateGivesTheCpuTokensWhereTheMarginsAllow) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const std::string dir = ModelDirectory("kelvin_generate_cuda", 96);
  const config::JobConfig job = JobOfModelDirectory(dir);
  inference::GenerateOptions options;
  options.token_prompts = {{1, 2, 3, 4, 5, 6, 7}, {40}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12}};
  options.max_new_tokens = 12;
  options.batch_size = 2;  // two batches, the second one short
  absl::StatusOr<std::vector<std::string>> cpu = inference::GenerateFromJob(job, options);
  absl::StatusOr<std::vector<std::string>> gpu =
      inference::GenerateFromJob(job, options, OnTheGpu(job));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<std::vector<int32_t>> expected = GeneratedTokens(*cpu);
  const std::vector<std::vector<int32_t>> actual = GeneratedTokens(*gpu);
  ASSERT_EQ(actual.size(), 3u);
  absl::StatusOr<std::unique_ptr<models::LlamaModel>> reference = inference::LoadInferenceModel(
      job, training::CheckpointChoice{}, training::TrainingPlacement{});
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_TRUE(testing::SameGreedyTokensWhereMarginsAllow(**reference, options.token_prompts[p],
                                                           expected[p], actual[p]))
        << "prompt " << p;
  }
}

TEST(ForwardCommandsCuda, EvalDataScoresTheCpuLossWithinTheBf16Tolerance) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const std::string dir = ModelDirectory("kelvin_score_cuda", 96);
  const config::JobConfig job = JobOfModelDirectory(dir);
  std::vector<int32_t> corpus;
  for (int32_t i = 0; i < 300; ++i) corpus.push_back((i * 37 + 5) % 96);
  const std::string path = (fs::path(::testing::TempDir()) / "kelvin_score_cuda.int32").string();
  ASSERT_TRUE(data::WriteTokenFile(path, corpus, data::TokenType::kInt32).ok());
  inference::ScoreOptions options;
  options.data = path;
  options.seq_length = 128;
  options.stride = 100;  // sliding: the later windows score their last 100 targets
  absl::StatusOr<inference::ScoreReport> cpu = inference::ScoreData(job, options);
  absl::StatusOr<inference::ScoreReport> gpu = inference::ScoreData(job, options, OnTheGpu(job));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->result.targets, 299);
  EXPECT_EQ(gpu->result.windows, cpu->result.windows);
  EXPECT_NEAR(gpu->result.loss(), cpu->result.loss(),
              testing::kBf16ModelLossRelTol * cpu->result.loss());
}

TEST(ForwardCommandsCuda, TheNeedleGridAndItsTemperatureHistogramsRunOnTheGpu) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  // The passkey task's byte vocabulary, so that the grid needs no tokenizer.
  const config::JobConfig job = JobOfModelDirectory(ModelDirectory("kelvin_needle_cuda", 260));
  NeedleOptions options;
  options.lengths = {128};
  options.depths = {0, 1};
  options.samples = 2;
  options.temperatures = true;
  absl::StatusOr<NeedleReport> cpu = RunNeedle(job, options);
  absl::StatusOr<NeedleReport> gpu = RunNeedle(job, options, OnTheGpu(job));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->cells.size(), 2u);
  for (size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(gpu->cells[c].samples, 2) << c;
    EXPECT_EQ(gpu->cells[c].mean_prompt_tokens, cpu->cells[c].mean_prompt_tokens) << c;
  }
  ASSERT_EQ(gpu->temperatures.size(), cpu->temperatures.size());
  for (size_t l = 0; l < gpu->temperatures.size(); ++l) {
    const LayerTemperatureHistograms &got = gpu->temperatures[l], &want = cpu->temperatures[l];
    EXPECT_GT(want.query.count, 0) << "layer " << l;
    EXPECT_EQ(got.query.count, want.query.count) << "layer " << l;
    EXPECT_EQ(got.value.count, want.value.count) << "layer " << l;
    EXPECT_NEAR(got.query.mean(), want.query.mean(), testing::kBf16ModelTemperatureAbsTol) << l;
    EXPECT_NEAR(got.value.mean(), want.value.mean(), testing::kBf16ModelTemperatureAbsTol) << l;
    ASSERT_EQ(got.sigma_alpha.size(), want.sigma_alpha.size());
    for (size_t h = 0; h < got.sigma_alpha.size(); ++h) {
      EXPECT_NEAR(got.sigma_alpha[h], want.sigma_alpha[h], testing::kBf16ModelTemperatureAbsTol);
    }
  }
}

}  // namespace
}  // namespace kelvin::launcher
