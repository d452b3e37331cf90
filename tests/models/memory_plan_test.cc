// The memory plan predicts exactly the buffers the model allocates, and its Llama-3-8B numbers
// are the known ones (parameters, and activations against Korthikanti et al.'s 34*s*b*h).
#include "models/llama/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/optim/adamw_optimizer.h"
#include "models/llama/llama_model.h"
#include "tests/models/memory_plan_check.h"
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
  testing::ExpectPlanMatchesAllocations(*config, {b, t}, model);
}

// A frozen base (LoRA on q and v, the SSA parameters and the norms trainable): the parameters
// count whole, the masters, gradients and AdamW moments only the trainable ones, as allocated.
TEST(MemoryPlan, AFrozenBaseCountsItsValuesOnly) {
  absl::StatusOr<models::LlamaConfig> config = models::LlamaPreset("tiny");
  ASSERT_TRUE(config.ok());
  config->num_layers = 2;
  config->ssa = ssa::SsaOptions();
  config->lora = models::LoraOptions{
      .rank = 4, .alpha = 8, .targets = {models::LoraTarget::kQ, models::LoraTarget::kV}};
  config->trainable = models::TrainableSets{.adapters = true, .ssa = true, .norms = true};
  models::LlamaModel model(*config, DType::kF32, {}, {},
                           models::LlamaPlacement{.separate_master = true});
  AdamWOptimizer optimizer(model.parameters(), AdamWSettings{});
  const int64_t b = 2, t = 5;
  const Tensor tokens = testing::RandomInts({b, t}, DType::kI32, 2, 0, 259);
  Tensor positions = Tensor::Empty({b, t}, DType::kI32);
  for (int64_t i = 0; i < b * t; ++i) positions.data<int32_t>()[i] = static_cast<int32_t>(i % t);
  model.Forward(Context::Cpu(), tokens, positions);
  models::MemoryPlanOptions options{b, t};
  options.separate_master = true;
  testing::ExpectPlanMatchesAllocations(*config, options, model);
  const models::MemoryPlan plan = models::PlanLlamaMemory(*config, options);
  testing::ExpectPlanMatchesParameterMemory(plan, model, optimizer);
  // What trains: per layer A [4, 128] and B [out, 4] of q (out 128) and v (out 64), the SSA
  // read-outs [4, 32], [2, 32] and alphas [4], the two norms [128]; then the final norm.
  const int64_t per_layer =
      (4 * 128 + 128 * 4) + (4 * 128 + 64 * 4) + 4 * 32 + 2 * 32 + 4 + 2 * 128;
  EXPECT_EQ(model.parameters().NumTrainableElements(), 2 * per_layer + 128);
  EXPECT_EQ(plan.gradients, (2 * per_layer + 128) * 4);
  EXPECT_EQ(plan.optimizer_state, (2 * per_layer + 128) * 4 * 2);
  EXPECT_EQ(plan.parameters, model.parameters().NumElements() * 4);
  EXPECT_GT(model.parameters().NumElements(), 10 * model.parameters().NumTrainableElements());
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    EXPECT_EQ(e.grad.defined(), e.trainable) << e.name;
  }
  // The layer's typed members: the targeted projections' A and B, nothing for the others.
  const auto& lora = model.layer_weights(1).lora;
  EXPECT_EQ(lora[static_cast<int>(models::LoraTarget::kQ)].a.shape(), (Shape{4, 128}));
  EXPECT_EQ(lora[static_cast<int>(models::LoraTarget::kV)].b.shape(), (Shape{64, 4}));
  EXPECT_FALSE(lora[static_cast<int>(models::LoraTarget::kK)].a.defined());
  EXPECT_FALSE(lora[static_cast<int>(models::LoraTarget::kDown)].b.defined());
  // LoRA dropout: the backward's masked input and its gradient, [N, in] each of the widest
  // adapted input (q and v read D = 128), in a training plan's operator scratch; a forward-only
  // plan draws no mask.
  EXPECT_EQ(plan.operator_scratch, 0);
  config->lora->dropout = 0.1;
  EXPECT_EQ(models::PlanLlamaMemory(*config, options).operator_scratch, 2 * b * t * 128 * 4);
  options.forward_only = true;
  EXPECT_EQ(models::PlanLlamaMemory(*config, options).operator_scratch, 0);
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
  // The attention backward's scratch (ssa/ssa_attention.cu; no SSA here: bf16 q~ [s, 32, 128] and
  // k~ [s, 8, 128], f32 dq~, dk~, dv~ and delta [s, 32]) and the 32 MiB cuBLASLt workspace; with
  // SSA also v~ and the temperatures' row terms. CPU (f32) plans have none.
  const int64_t kv = 8 * 128;
  EXPECT_EQ(plan.operator_scratch,
            s * h * (2 + 4) + s * kv * (2 + 2 * 4) + s * 32 * 4 + (int64_t{32} << 20));
  models::LlamaConfig with_ssa = config;
  with_ssa.ssa = ssa::SsaOptions();
  EXPECT_EQ(models::PlanLlamaMemory(with_ssa, {1, 8192, DType::kBF16, DType::kBF16, true})
                    .operator_scratch -
                plan.operator_scratch,
            s * kv * 2 + s * 32 * 4 * 2 + s * 8 * 4);
  EXPECT_EQ(models::PlanLlamaMemory(config, {1, 8192}).operator_scratch, 0);
  std::printf("Llama-3-8B, 1 x 8192 tokens, bf16: %s\n", plan.ToString().c_str());
}

// The cuDNN attention core's backward scratch in place of the own kernel's: bf16 dq~ [s, 32, 128],
// dk~, dv~ [s, 8, 128], the frontend's f32 dQ accumulator [s, 32, 128] and row sums [s, 32], and
// with GQA f32 full-head dK, dV [s, 32, 128]; AUTO plans for the larger of the two cores.
TEST(MemoryPlan, AttentionScratchFollowsTheChosenCore) {
  const models::LlamaConfig config = *models::LlamaPreset("llama3-8b");
  models::MemoryPlanOptions options{1, 8192, DType::kBF16, DType::kBF16, /*separate_master=*/true};
  const int64_t fused = models::PlanLlamaMemory(config, options).operator_scratch;
  options.attention_backend = ssa::AttentionBackend::kCudnn;
  const int64_t cudnn = models::PlanLlamaMemory(config, options).operator_scratch;
  options.attention_backend = ssa::AttentionBackend::kAuto;
  const int64_t automatic = models::PlanLlamaMemory(config, options).operator_scratch;
  const int64_t s = 8192, q = 32 * 128, kv = 8 * 128;
  const int64_t fused_core = (s * q + 2 * s * kv + s * 32) * 4;
  const int64_t cudnn_core = (s * q + 2 * s * kv) * 2 + (s * q + s * 32) * 4 + 2 * s * q * 4;
  EXPECT_EQ(cudnn - fused, cudnn_core - fused_core);
  EXPECT_EQ(automatic, std::max(fused, cudnn));
}

// Llama-3-8B at 8K tokens on a TP4 (sequence parallel) x PP2 x DP8 layout with ZeRO-1, bf16:
// the ranks' parameters add up to the model (the norm weights, replicated over TP, 4 times), and
// the activations of a rank's layer are a quarter of the unsharded layer's but for the parts
// replicated over TP.
TEST(MemoryPlan, Llama3_8BPerRankUnderTensorAndPipelineParallelism) {
  const models::LlamaConfig config = *models::LlamaPreset("llama3-8b");
  models::MemoryPlanOptions o{1, 8192, DType::kBF16, DType::kBF16, /*separate_master=*/true};
  o.tensor_parallel = 4;
  o.sequence_parallel = true;
  o.pipeline_parallel = 2;
  o.data_parallel = 8;
  o.distributed_optimizer = true;
  int64_t parameter_bytes = 0;
  for (int pp = 0; pp < 2; ++pp) {
    o.pipeline_rank = pp;
    o.micro_batches_in_flight = 2 - pp;  // 1F1B: P - rank
    for (int tp = 0; tp < 4; ++tp) {
      o.tensor_rank = tp;
      parameter_bytes += models::PlanLlamaMemory(config, o).parameters;
    }
  }
  const int64_t norm_elements = 4096 * (2 * 32 + 1);
  EXPECT_EQ(parameter_bytes, (8030261248LL + 3 * norm_elements) * 2);
  o.pipeline_rank = 0;
  o.micro_batches_in_flight = 2;
  o.tensor_rank = 0;
  const models::MemoryPlan first = models::PlanLlamaMemory(config, o);
  // Per layer: x, x_mid [s/4, h]; h_attn, h_mlp [s, h]; q, attn [s, h/4]; k, v [s, h/16];
  // gate, up, act [s, 14336/4] in bf16; rstd x2 [s/4] and the lse of 8 heads [s, 8] in f32.
  const int64_t s = 8192, h = 4096;
  EXPECT_EQ(first.activations_per_layer,
            2 * (2 * s / 4 * h + s * (2 * h + 2 * h / 4 + 2 * h / 16 + 3 * 14336 / 4)) +
                4 * (2 * s / 4 + s * 8));
  std::printf(
      "Llama-3-8B, 1 x 8192 tokens, bf16, TP4+SP x PP2 x DP8 ZeRO-1, first stage (2 "
      "micro-batches in flight): %s\n",
      first.ToString().c_str());
  o.pipeline_rank = 1;
  o.micro_batches_in_flight = 1;
  std::printf("last stage (1 in flight): %s\n",
              models::PlanLlamaMemory(config, o).ToString().c_str());
}

}  // namespace
}  // namespace kelvin
