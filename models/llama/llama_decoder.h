// Forward-only decoding of one sequence with a KV cache, the path generation runs on: a prompt is
// prefilled in one call, then tokens are appended one (or a few) at a time, each call returning the
// logits of the tokens it appended. SSA decodes exactly: the cache holds each layer's keys and
// values as projected (before RoPE and tau^v, with the value temperature's source when it has its
// own projection), and the attention operator applies RoPE and tau^v as it loads them, as in
// training; each new token's tau^q comes from its own pre-RoPE query and position. Position ids
// count from 0 (one document). It reads the weights of a whole model on one rank (no tensor or
// pipeline parallelism) on the model's device and dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/llama/llama_model.h"

namespace kelvin::models {

class LlamaDecoder {
 public:
  // A decoder of up to `max_tokens` tokens (at most max_position_embeddings); the model must
  // outlive it. A sharded model is an error that says so.
  static absl::StatusOr<LlamaDecoder> Create(const LlamaModel& model, int64_t max_tokens);

  // Appends `tokens` (ids below vocab_size) at the next positions -> their logits [n, V] (the
  // model's dtype and device; valid until the next call). An id outside the vocabulary or more
  // tokens than fit is an error naming it.
  absl::StatusOr<Tensor> Append(const std::vector<int32_t>& tokens);

  int64_t length() const { return length_; }
  const Context& context() const { return model_->context(); }
  int64_t max_tokens() const { return max_tokens_; }
  // Forgets the sequence (the cache is kept for the next one).
  void Reset() { length_ = 0; }

  // Called in each layer's forward with the appended tokens' temperatures (the SSA study's
  // histograms): positions [n] i32, tau^q [n, H] and tau^v [n, G] (AccumDType on the model's
  // device; undefined where the model has no such temperature). Not called without SSA.
  using TemperatureObserver = std::function<void(int64_t layer, const Tensor& positions,
                                                 const Tensor& tau_q, const Tensor& tau_v)>;
  void ObserveTemperatures(TemperatureObserver observer) { observer_ = std::move(observer); }

 private:
  // A layer's weights, found by name once (the model's tensors, not copies); the SSA ones are
  // undefined where the flags give the layer none.
  struct LayerWeights {
    Tensor input_norm, q, k, v, o, post_norm, gate, up, down;  // [out, in] as Hugging Face's
    Tensor query_projection, value_projection;                 // W_tmp without weight sharing
    ssa::SsaParameters ssa;                                    // a^q, a^v, alpha
  };
  // A layer's cache, [max_tokens, G, d] each; value_source only without weight sharing.
  struct LayerCache {
    Tensor k, v, value_source;
  };
  LlamaDecoder(const LlamaModel& model, int64_t max_tokens);
  // One decoder layer on x [n, D] (in place) for the tokens at [start, start + n).
  void Layer(int64_t layer, int64_t start, Tensor& x);

  const LlamaModel* model_;
  int64_t max_tokens_;
  int64_t length_ = 0;
  Tensor positions_;                   // [max_tokens] i32: 0, 1, 2, ...
  Tensor inv_freq_;                    // [d/2] RoPE inverse frequencies
  std::vector<LayerWeights> weights_;  // [L]
  std::vector<LayerCache> cache_;      // [L]
  Tensor logits_;                      // [n, V] of the last call
  TemperatureObserver observer_;
};

}  // namespace kelvin::models
