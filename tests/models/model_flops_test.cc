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

}  // namespace
}  // namespace kelvin::models
