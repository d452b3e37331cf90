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

}  // namespace
}  // namespace kelvin::models
