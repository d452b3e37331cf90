// Model FLOPs of Llama training (see model_flops.h).
#include "models/llama/model_flops.h"

namespace kelvin::models {

double TrainingFlopsPerToken(const LlamaConfig& config, int64_t sequence_length) {
  const auto d = static_cast<double>(config.hidden_size);
  const auto q = static_cast<double>(config.num_attention_heads * config.head_dim);
  const auto kv = static_cast<double>(config.num_key_value_heads * config.head_dim);
  const auto layers = static_cast<double>(config.num_layers);
  // W_q, W_o; W_k, W_v; gate, up, down.
  const double per_layer =
      2 * d * q + 2 * d * kv + 3 * d * static_cast<double>(config.intermediate_size);
  const double gemm_parameters = layers * per_layer + static_cast<double>(config.vocab_size) * d;
  return 6 * gemm_parameters + 6 * layers * static_cast<double>(sequence_length) * q;
}

}  // namespace kelvin::models
