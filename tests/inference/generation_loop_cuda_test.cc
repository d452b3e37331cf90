// The generation loop on CUDA in bf16 (skips without a GPU, saying why): greedy generation of a
// batch of prompts of different lengths gives the f32 CPU run's tokens where the margins allow.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "inference/generation_loop.h"
#include "models/llama/llama_decoder.h"
#include "models/llama/llama_pipeline_stage.h"
#include "tests/models/greedy_margin.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/backends.h"

namespace kelvin::inference {
namespace {

// Greedy generation of a batch of prompts of different lengths (one of a single token) on both
// devices: the bf16 run's tokens are the f32 run's wherever the f32 margins say bf16 cannot
// swap them (tests/models/greedy_margin.h). The weights: random in f32 (the read-outs and alphas
// normal(0, 0.7), so the temperatures differ from 1), every 12th row of the LM head 4x so that the
// greedy choice mostly falls on one of those tokens far ahead of the rest (random logits are near
// ties that bf16 may swap); the same values in bf16 on CUDA.
TEST(GenerationCuda, GreedyTokensEqualTheCpuF32RunWhereTheMarginsAllow) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const models::LlamaConfig config = testing::CudaSizedSsaLlamaConfig(true, true);
  models::LlamaModel cpu_f32(config, DType::kF32);
  models::LlamaModel cuda_bf16(config, DType::kBF16, {}, {},
                               {.ctx = testing::ContextFor(Device::Cuda())});
  cpu_f32.InitRandom(11);
  std::mt19937_64 rng(12);
  std::normal_distribution<double> normal(0.0, 0.7);
  for (const ParameterSet::Entry& e : cpu_f32.parameters().entries()) {
    if (e.group == ParamGroup::kTemperature) {
      for (int64_t i = 0; i < e.value.numel(); ++i) e.value.data<float>()[i] = normal(rng);
    }
    if (e.name == models::kLmHeadName) {
      for (int64_t row = 0; row < config.vocab_size; row += 12) {
        float* values = e.value.data<float>() + row * config.hidden_size;
        for (int64_t i = 0; i < config.hidden_size; ++i) values[i] *= 4;
      }
    }
    cuda_bf16.parameters().Assign(e.name, e.value);
  }
  std::vector<GenerationRequest> requests(3);
  const std::vector<int64_t> prompts = {12, 1, 40};
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t t = 0; t < prompts[b]; ++t) {
      requests[b].prompt.push_back(static_cast<int32_t>((5 * t + 17 * b + 2) % config.vocab_size));
    }
    requests[b].max_new_tokens = 16;
  }
  absl::StatusOr<models::LlamaDecoder> cpu = models::LlamaDecoder::Create(cpu_f32, 64, 3);
  absl::StatusOr<models::LlamaDecoder> gpu = models::LlamaDecoder::Create(cuda_bf16, 64, 3);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  absl::StatusOr<std::vector<GenerationResult>> expected = GenerateBatch(*cpu, requests);
  absl::StatusOr<std::vector<GenerationResult>> actual = GenerateBatch(*gpu, requests);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  size_t agreed = 0;
  for (int64_t b = 0; b < 3; ++b) {
    size_t compared = 0;
    EXPECT_TRUE(testing::SameGreedyTokensWhereMarginsAllow(
        cpu_f32, requests[b].prompt, (*expected)[b].tokens, (*actual)[b].tokens, &compared))
        << "prompt " << b;
    agreed += compared;
  }
  std::printf("greedy tokens agreed on: %zu of %d\n", agreed, 3 * 16);
}

}  // namespace
}  // namespace kelvin::inference
