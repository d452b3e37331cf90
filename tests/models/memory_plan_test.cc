// The memory plan predicts exactly the buffers the model allocates, and its Llama-3-8B numbers
// are the known ones (parameters, and activations against Korthikanti et al.'s 34*s*b*h).
#include "models/llama/memory_plan.h"

#include <gtest/gtest.h>

#include "models/llama/llama_model.h"
#include "tests/testing/tensors.h"

namespace kelvin {
namespace {

TEST(MemoryPlan, PredictsTheModelsAllocationsExactly) {
  absl::StatusOr<models::LlamaConfig> config = models::LlamaPreset("tiny");
  ASSERT_TRUE(config.ok());
  config->num_layers = 2;
  models::LlamaModel model(*config, DType::kF32);
  model.InitRandom(1);
  const int64_t b = 3, t = 7;
  const Tensor tokens = testing::RandomInts({b, t}, DType::kI32, 1, 0, 259);
  Tensor positions = Tensor::Empty({b, t}, DType::kI32);
  for (int64_t i = 0; i < b * t; ++i) positions.data<int32_t>()[i] = static_cast<int32_t>(i % t);
  model.Forward(Context::Cpu(), tokens, positions);
  const models::MemoryPlan plan = models::PlanLlamaMemory(*config, {b, t});
  const models::LlamaModel::BufferBytes allocated = model.AllocatedBufferBytes();
  EXPECT_EQ(plan.activations, allocated.activations);
  EXPECT_EQ(plan.logits, allocated.logits);
  EXPECT_EQ(plan.backward_scratch, allocated.backward_scratch);
  EXPECT_EQ(plan.parameters, model.parameters().NumElements() * 4);
}

TEST(MemoryPlan, Llama3_8BAt8KTokensInBf16) {
  const models::LlamaConfig config = *models::LlamaPreset("llama3-8b");
  const models::MemoryPlan plan = models::PlanLlamaMemory(
      config, {1, 8192, DType::kBF16, DType::kBF16, /*separate_master=*/true});
  // Korthikanti et al. (2022) count 34*s*b*h bytes per layer plus 5*a*s^2*b for the attention
  // scores, which a fused attention never stores; Kelvin keeps the 34*s*b*h part and the f32
  // statistics (rstd x2 and the log-sum-exp of 32 heads) only.
  const int64_t s = 8192, h = 4096;
  const int64_t korthikanti = 34 * s * h;
  EXPECT_EQ(plan.activations_per_layer, korthikanti + s * 4 * (2 + 32));
  EXPECT_EQ(plan.parameters, 8030261248LL * 2);
  std::printf("Llama-3-8B, 1 x 8192 tokens, bf16: %s\n", plan.ToString().c_str());
}

}  // namespace
}  // namespace kelvin
