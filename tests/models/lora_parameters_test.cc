// LoRA's parameters in the model: each adapter shards with its base projection under tensor
// parallelism (column-parallel base: A whole with a TP-partial gradient, B split like the output;
// row-parallel base: A split like the input, B whole), and starts as peft starts it (B zero, A
// uniform in +-1/sqrt(in)).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/llama/llama_model.h"
#include "models/llama/llama_sharding.h"

namespace kelvin::models {
namespace {

// The tiny preset (D 128, F 384, H 4, G 2, d 32) with rank-4 adapters on every projection.
LlamaConfig TinyWithLora() {
  LlamaConfig config = *LlamaPreset("tiny");
  config.num_layers = 1;
  config.lora =
      LoraOptions{.rank = 4,
                  .alpha = 8,
                  .targets = {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO,
                              LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown}};
  config.trainable = TrainableSets{.adapters = true};
  return config;
}

void ExpectShard(const ParameterShard& shard, int axis, int64_t begin, int64_t count, bool partial,
                 bool replicated_kv, const std::string& name) {
  EXPECT_EQ(shard.axis, axis) << name;
  if (axis >= 0) {
    EXPECT_EQ(shard.begin, begin) << name;
    EXPECT_EQ(shard.count, count) << name;
  }
  EXPECT_EQ(shard.partial_over_tensor_parallel, partial) << name;
  EXPECT_EQ(shard.replicated_kv, replicated_kv) << name;
}

TEST(LoraParameters, ShardWithTheirBaseProjection) {
  const LlamaConfig c = TinyWithLora();
  const LlamaShardLayout two = ShardLayoutOf(c, /*tp_rank=*/1, /*tp_size=*/2);
  const auto shard = [&](const LlamaShardLayout& layout, const std::string& module, char ab) {
    const std::string name = "model.layers.0." + module + ".lora_" + ab + ".weight";
    return std::pair{ShardOf(c, layout, name), name};
  };
  // Column-parallel bases: A whole (gradient summed over TP), B rows like W's rows.
  for (const auto& [module, begin, count] :
       {std::tuple{"self_attn.q_proj", 64, 64}, std::tuple{"self_attn.k_proj", 32, 32},
        std::tuple{"mlp.gate_proj", 192, 192}, std::tuple{"mlp.up_proj", 192, 192}}) {
    const auto [a, a_name] = shard(two, module, 'A');
    ExpectShard(a, -1, 0, 0, /*partial=*/true, false, a_name);
    const auto [b, b_name] = shard(two, module, 'B');
    ExpectShard(b, 0, begin, count, false, false, b_name);
  }
  // Row-parallel bases: A columns like W's columns, B whole (gradient summed over TP: each rank's
  // z is its input slice's partial sum).
  for (const auto& [module, begin, count] :
       {std::tuple{"self_attn.o_proj", 64, 64}, std::tuple{"mlp.down_proj", 192, 192}}) {
    const auto [a, a_name] = shard(two, module, 'A');
    ExpectShard(a, 1, begin, count, false, false, a_name);
    const auto [b, b_name] = shard(two, module, 'B');
    ExpectShard(b, -1, 0, 0, /*partial=*/true, false, b_name);
  }
  // TP 4 > G 2: B of k and v follows the replicated KV head (rank 3 holds head 1).
  const auto [kv_b, kv_name] = shard(ShardLayoutOf(c, 3, 4), "self_attn.v_proj", 'B');
  ExpectShard(kv_b, 0, 32, 32, false, /*replicated_kv=*/true, kv_name);
}

TEST(LoraParameters, StartAsPeftStartsThem) {
  LlamaModel model(TinyWithLora(), DType::kF32);
  model.InitRandom(7);
  int adapters = 0;
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    if (!IsLoraParameter(e.name)) {
      EXPECT_FALSE(e.trainable) << e.name;
      continue;
    }
    ++adapters;
    EXPECT_TRUE(e.trainable) << e.name;
    const float* v = e.value.data<float>();
    if (e.name.ends_with("lora_B.weight")) {
      for (int64_t i = 0; i < e.value.numel(); ++i) ASSERT_EQ(v[i], 0.0f) << e.name;
      continue;
    }
    const double bound = 1 / std::sqrt(static_cast<double>(e.shape[1]));
    double squares = 0;
    for (int64_t i = 0; i < e.value.numel(); ++i) {
      ASSERT_LE(std::abs(v[i]), bound) << e.name;
      squares += static_cast<double>(v[i]) * v[i];
    }
    // U(-b, b) has variance b^2 / 3: within 25% over 512 or more draws.
    EXPECT_NEAR(squares / static_cast<double>(e.value.numel()), bound * bound / 3,
                0.25 * bound * bound / 3)
        << e.name;
  }
  EXPECT_EQ(adapters, 14);
}

}  // namespace
}  // namespace kelvin::models
