// The tiny Llama+SSA of the model tests (hidden 16, 2 layers, 4 query / 2 KV heads of dim 4, FFN
// 24, vocabulary 12): small enough for f64 finite differences, with every dimension a tensor-
// parallel split of 2 and 4 divides (4 ranks replicate the 2 KV heads); and the smallest one the
// CUDA kernels run.
#pragma once

#include "models/llama/llama_config.h"

namespace kelvin::testing {

inline models::LlamaConfig TinySsaLlamaConfig(bool weight_sharing, bool position_aware) {
  models::LlamaConfig c;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 12;
  c.max_position_embeddings = 32;
  c.rope.theta = 10000.0;
  ssa::SsaOptions options;
  options.weight_sharing = weight_sharing;
  options.position_aware = position_aware;
  c.ssa = options;
  return c;
}

// The tiny model grown to what the CUDA attention runs: head dim 64 (its sizes are 64 and 128),
// hidden 256, FFN 384, vocabulary 96, 256 positions; 2 layers, GQA 4/2 as above.
inline models::LlamaConfig CudaSizedSsaLlamaConfig(bool weight_sharing, bool position_aware) {
  models::LlamaConfig c = TinySsaLlamaConfig(weight_sharing, position_aware);
  c.hidden_size = 256;
  c.intermediate_size = 384;
  c.head_dim = 64;
  c.vocab_size = 96;
  c.max_position_embeddings = 256;
  return c;
}

}  // namespace kelvin::testing
