// Model FLOPs per training token for Llama-3-8B at 8K tokens, worked out by hand from the
// published shapes (hidden 4096, 32 layers, 32 query and 8 KV heads of 128, FFN 14336, vocab
// 128256): the GEMM parameters are 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) +
// 128256 x 4096 = 7,504,658,432 (8.03 B parameters less the embedding table and the norms), so
// 6 x that = 45,027,950,592, plus causal attention 6 x 32 x 8192 x 4096 = 6,442,450,944.
#include "models/llama/model_flops.h"

#include <gtest/gtest.h>

namespace kelvin::models {
namespace {

TEST(ModelFlops, Llama3_8bAt8KTokens) {
  const absl::StatusOr<LlamaConfig> config = LlamaPreset("llama3-8b");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TrainingFlopsPerToken(*config, 8192), 45027950592.0 + 6442450944.0);
  // The attention term grows with the row: 1K tokens less by 7/8 of it.
  EXPECT_EQ(TrainingFlopsPerToken(*config, 1024), 45027950592.0 + 6442450944.0 / 8);
}

TEST(ModelFlops, AttentionCountsTheQueryHeadsWidth) {
  // Hidden 64 with 4 heads of 32 (H d = 128, not D) and 2 KV heads, FFN 96, vocab 100, 1 layer:
  // P_gemm = 2*64*128 + 2*64*64 + 3*64*96 + 100*64 = 16384 + 8192 + 18432 + 6400 = 49408.
  LlamaConfig config;
  config.hidden_size = 64;
  config.num_attention_heads = 4;
  config.head_dim = 32;
  config.num_key_value_heads = 2;
  config.intermediate_size = 96;
  config.vocab_size = 100;
  config.num_layers = 1;
  EXPECT_EQ(TrainingFlopsPerToken(config, 10), 6 * 49408.0 + 6 * 10 * 128.0);
}

// The hardware count of one Llama-3-8B layer at 8K tokens: its matrices hold 2 x 4096^2 +
// 2 x 4096 x 1024 + 3 x 4096 x 14336 = 218,103,808 parameters (W_q, W_k, W_v: 25,165,824; gate
// and up: 117,440,512), T H d = 8192 x 4096.
TEST(ModelFlops, DecoderLayerHardwareCountWithAndWithoutRecompute) {
  const absl::StatusOr<LlamaConfig> config = LlamaPreset("llama3-8b");
  ASSERT_TRUE(config.ok()) << config.status();
  const double matrices = 218103808.0, qkv = 25165824.0, gate_up = 117440512.0;
  const double row = 8192.0 * 4096.0;
  const LayerFlops plain = DecoderLayerFlopsPerToken(*config, 8192, false, false);
  EXPECT_EQ(plain.gemm.forward, 2 * matrices);
  EXPECT_EQ(plain.gemm.backward, 4 * matrices);
  EXPECT_EQ(plain.attention.forward, 2 * row);
  EXPECT_EQ(plain.attention.backward, 5 * row);
  // The model count is the hardware count without recompute, less the backward's second score
  // product: 6 P + 6 T H d per layer, and the LM head's 6 V D.
  EXPECT_EQ(32 * (plain.gemm.Total() + plain.attention.Total() - row) +
                LmHeadFlopsPerToken(*config).Total(),
            TrainingFlopsPerToken(*config, 8192));
  const LayerFlops attention = DecoderLayerFlopsPerToken(*config, 8192, true, false);
  EXPECT_EQ(attention.gemm.backward, 4 * matrices + 2 * qkv);
  EXPECT_EQ(attention.attention.backward, 7 * row);
  const LayerFlops mlp = DecoderLayerFlopsPerToken(*config, 8192, false, true);
  EXPECT_EQ(mlp.gemm.backward, 4 * matrices + 2 * gate_up);
  EXPECT_EQ(mlp.attention.backward, 5 * row);
  EXPECT_EQ(LmHeadFlopsPerToken(*config).forward, 2 * 128256.0 * 4096);
}

}  // namespace
}  // namespace kelvin::models
