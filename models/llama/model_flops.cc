// Training FLOPs of Llama (see model_flops.h).
#include "models/llama/model_flops.h"

namespace kelvin::models {
namespace {

// The matrix parameters of one decoder layer's attention projections and MLP.
struct LayerMatrices {
  double qkv = 0;  // W_q, W_k, W_v
  double out = 0;  // W_o
  double gate_up = 0;
  double down = 0;
  double Total() const { return qkv + out + gate_up + down; }
};

LayerMatrices LayerMatricesOf(const LlamaConfig& config) {
  const auto d = static_cast<double>(config.hidden_size);
  const auto q = static_cast<double>(config.num_attention_heads * config.head_dim);
  const auto kv = static_cast<double>(config.num_key_value_heads * config.head_dim);
  const auto ffn = static_cast<double>(config.intermediate_size);
  return {.qkv = d * q + 2 * d * kv, .out = q * d, .gate_up = 2 * d * ffn, .down = ffn * d};
}

// H d: the query heads' width.
double QueryWidth(const LlamaConfig& config) {
  return static_cast<double>(config.num_attention_heads * config.head_dim);
}

}  // namespace

double TrainingFlopsPerToken(const LlamaConfig& config, int64_t sequence_length) {
  const auto layers = static_cast<double>(config.num_layers);
  const double gemm_parameters =
      layers * LayerMatricesOf(config).Total() +
      static_cast<double>(config.vocab_size) * static_cast<double>(config.hidden_size);
  return 6 * gemm_parameters +
         6 * layers * static_cast<double>(sequence_length) * QueryWidth(config);
}

LayerFlops DecoderLayerFlopsPerToken(const LlamaConfig& config, int64_t sequence_length,
                                     bool recompute_attention, bool recompute_mlp) {
  const LayerMatrices m = LayerMatricesOf(config);
  const double recomputed = (recompute_attention ? m.qkv : 0.0) + (recompute_mlp ? m.gate_up : 0.0);
  const double row = static_cast<double>(sequence_length) * QueryWidth(config);  // T H d
  LayerFlops flops;
  // A frozen base (config.trainable set) computes no weight gradients: its backward is dx alone.
  const double backward_per_parameter = config.trainable.has_value() ? 2 : 4;
  flops.gemm = {.forward = 2 * m.Total(),
                .backward = backward_per_parameter * m.Total() + 2 * recomputed};
  flops.attention = {.forward = 2 * row, .backward = 5 * row + (recompute_attention ? 2 * row : 0)};
  return flops;
}

PassFlops LmHeadFlopsPerToken(const LlamaConfig& config) {
  const double matrix =
      static_cast<double>(config.vocab_size) * static_cast<double>(config.hidden_size);
  const bool frozen = config.trainable.has_value() && !config.trainable->embeddings;
  return {.forward = 2 * matrix, .backward = (frozen ? 2 : 4) * matrix};
}

}  // namespace kelvin::models
