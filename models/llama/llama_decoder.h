// Forward-only decoding with a KV cache, of one sequence or a batch of different lengths: a prompt
// prefilled in one call, then a token (or a few) at a time, each call returning the appended
// tokens' logits (or only the last ones'). SSA exactly: the cache holds k~ = RoPE(k) and
// v~ = tau^v v, each row written once when its token is appended (tau^v is per token and has no
// position term), so a call's work on the cache is the attention itself; each new token's tau^q
// comes from its own query and position (positions from 0: one document). On the model's device
// and in its dtype (f32 on the CPU, bf16 on CUDA), its TP ranks together.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/llama/llama_model.h"

namespace kelvin::models {

class LlamaDecoder {
 public:
  // A decoder of `sequences` sequences (a batch) of up to `max_tokens` tokens each (at most
  // max_position_embeddings, but for dynamic NTK scaling, which runs beyond it); the model must
  // outlive it. A tensor-parallel model decodes on every
  // rank of its group together (each rank its heads, every call's logits gathered whole); a model
  // split into pipeline stages is an error that says so.
  static absl::StatusOr<LlamaDecoder> Create(const LlamaModel& model, int64_t max_tokens,
                                             int64_t sequences = 1);

  // logit_rows of Append and AppendBatch: the logits of every appended token.
  static constexpr int64_t kEveryToken = INT64_MAX;

  // Appends `tokens` (ids below vocab_size) to sequence 0 at its next positions -> the logits
  // [min(n, logit_rows), V] of its last min(n, logit_rows) tokens (the model's dtype and device;
  // valid until the next call; the final norm and LM head run on those rows only). An id outside
  // the vocabulary, more tokens than fit or logit_rows < 1 is an error naming it.
  absl::StatusOr<Tensor> Append(const std::vector<int32_t>& tokens,
                                int64_t logit_rows = kEveryToken);
  // Appends tokens[b] to sequence b for every b < sequences() in one pass (an empty list leaves
  // sequence b as it is; at least one is not empty): the projections and the MLP take every
  // sequence's rows together, the attention each sequence's own cache -> logits
  // [sum_b min(n_b, logit_rows), V] of each sequence's last appended tokens, sequence 0's rows
  // first (logit_rows 1: the next token's of each). Errors as for Append, naming the sequence.
  absl::StatusOr<Tensor> AppendBatch(const std::vector<std::vector<int32_t>>& tokens,
                                     int64_t logit_rows = kEveryToken);

  int64_t length(int64_t sequence = 0) const { return lengths_[sequence]; }
  int64_t sequences() const { return static_cast<int64_t>(lengths_.size()); }
  const LlamaModel& model() const { return *model_; }
  const Context& context() const { return model_->context(); }
  int64_t max_tokens() const { return max_tokens_; }
  // Forgets every sequence (the cache is kept for the next ones).
  void Reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

  // Called in each layer's forward with each sequence's appended tokens' temperatures (the SSA
  // study's histograms): positions [n] i32, tau^q [n, H] and tau^v [n, G] of this rank's heads
  // (AccumDType on the model's device; undefined where the model has no such temperature). Not
  // called without SSA.
  using TemperatureObserver = std::function<void(int64_t layer, const Tensor& positions,
                                                 const Tensor& tau_q, const Tensor& tau_v)>;
  void ObserveTemperatures(TemperatureObserver observer) { observer_ = std::move(observer); }

 private:
  // A layer's cache, [sequences * max_tokens, G, d] each (sequence b's positions from row
  // b * max_tokens): k~ = RoPE(k) and v~ = tau^v v (v itself without the value temperature).
  struct LayerCache {
    Tensor k, v;
  };
  // The rows of one sequence in a call: its tokens at positions [start, start + n) are rows
  // [row, row + n) of the call's activations.
  struct Segment {
    int64_t sequence, start, n, row;
  };
  LlamaDecoder(const LlamaModel& model, int64_t max_tokens, int64_t sequences);
  class CacheKeys;  // a call's attention side in one layer (LlamaAttentionKeys)
  // One decoder layer on x [N, D] (in place), N the segments' rows, RoPE at `inv_freq` [d/2].
  void Layer(int64_t layer, const std::vector<Segment>& segments, const Tensor& inv_freq,
             Tensor& x);
  // x [N, D] -> [R, D]: each segment's last min(n, logit_rows) rows (x itself when that is all).
  Tensor LastRows(const std::vector<Segment>& segments, int64_t logit_rows, const Tensor& x) const;

  const LlamaModel* model_;
  int64_t max_tokens_;
  std::vector<int64_t> lengths_;   // [sequences]
  Tensor positions_;               // [max_tokens] i32: 0, 1, 2, ...
  std::vector<LayerCache> cache_;  // [L]
  Tensor logits_;                  // [R, V] of the last call
  TemperatureObserver observer_;
};

}  // namespace kelvin::models
