// The decoder's calls of the one layer (LlamaLayer) on the appended tokens of every sequence at
// once, the attention per sequence: its query block at [start, start + n) against its cached keys
// [0, start + n), which hold k~ and v~ (each row rotated and scaled once, when it was appended).
#include "models/llama/llama_decoder.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/ops/embedding.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "parallel/tensor_parallel.h"
#include "ssa/ssa_attention.h"

namespace kelvin::models {

// The decoder's attention side in one layer of one call: each sequence's new keys and values go
// into its cache rows, where they become k~ = RoPE(k) and v~ = tau^v v once; each sequence's
// query block at [start, start + n) then attends to its cached keys [0, start + n).
class LlamaDecoder::CacheKeys : public LlamaAttentionKeys {
 public:
  CacheKeys(const LlamaDecoder& decoder, LayerCache& cache, const std::vector<Segment>& segments,
            const Tensor& inv_freq)
      : decoder_(decoder), cache_(cache), segments_(segments), inv_freq_(inv_freq) {}

  // Sequence s's cache rows [begin, end) of `t` (the layer's k or v cache).
  Tensor Cached(const Tensor& t, const Segment& s, int64_t begin, int64_t end) const {
    const int64_t first = s.sequence * decoder_.max_tokens_;
    return t.Slice(first + begin, first + end);
  }
  // Whether the k and v projections write the cache rows directly (one sequence in the call).
  bool Direct() const { return segments_.size() == 1; }

  void PlaceKeys(const Context& ctx, const LlamaLayerWeights& w,
                 LlamaLayerActivations& a) override {
    const LlamaConfig& c = decoder_.model_->config();
    const ssa::SsaOptions& options = decoder_.model_->layer().attention_options();
    for (const Segment& s : segments_) {
      const int64_t end = s.start + s.n;
      Tensor new_k = Cached(cache_.k, s, s.start, end), new_v = Cached(cache_.v, s, s.start, end);
      if (!Direct()) {
        CopyTensor(ctx, a.k.Slice(s.row, s.row + s.n), new_k);
        CopyTensor(ctx, a.v.Slice(s.row, s.row + s.n), new_v);
      }
      // In place, once: every later call reads the rows as they are.
      Tensor tau_v = a.tau_v.defined() ? a.tau_v.Slice(s.row, s.row + s.n) : Tensor();
      ssa::PrepareKeysAndValues(
          ctx, options, new_k, new_v,
          a.value_source.defined() ? a.value_source.Slice(s.row, s.row + s.n) : Tensor(),
          decoder_.positions_.Slice(s.start, end), inv_freq_, w.ssa.value_readout, new_k, new_v,
          tau_v, ops::RopeAttentionFactor(c.rope));
    }
  }

  std::vector<LlamaAttentionCall> Calls(const LlamaLayerActivations& /*a*/) const override {
    const double rope_factor = ops::RopeAttentionFactor(decoder_.model_->config().rope);
    std::vector<LlamaAttentionCall> calls;
    for (const Segment& s : segments_) {
      const int64_t end = s.start + s.n;
      ssa::SsaAttentionInputs inputs{Tensor(),
                                     decoder_.positions_.Slice(s.start, end),
                                     Tensor(),
                                     Cached(cache_.k, s, 0, end),
                                     Cached(cache_.v, s, 0, end),
                                     decoder_.positions_.Slice(0, end),
                                     Tensor(),
                                     inv_freq_,
                                     rope_factor};
      inputs.keys_prepared = true;
      calls.push_back({{1, s.start, s.n, 0, end}, s.row, s.row + s.n, inputs, Tensor(), {}});
    }
    return calls;
  }

 private:
  const LlamaDecoder& decoder_;
  LayerCache& cache_;
  const std::vector<Segment>& segments_;
  const Tensor& inv_freq_;
};

absl::StatusOr<LlamaDecoder> LlamaDecoder::Create(const LlamaModel& model, int64_t max_tokens,
                                                  int64_t sequences) {
  if (model.stage().stages > 1) {
    return absl::UnimplementedError(
        "decoding runs every layer on each rank: this model is split into pipeline stages (decode "
        "with tensor parallelism or one process)");
  }
  const LlamaConfig& config = model.config();
  const int64_t most = config.PositionLimit();
  if (max_tokens < 1 || max_tokens > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a decoder of ", max_tokens, " tokens: the model's positions are [1, ", most, "]",
        most == config.max_position_embeddings ? " (max_position_embeddings)" : ""));
  }
  if (sequences < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a decoder of ", sequences, " sequences: give at least 1"));
  }
  return LlamaDecoder(model, max_tokens, sequences);
}

LlamaDecoder::LlamaDecoder(const LlamaModel& model, int64_t max_tokens, int64_t sequences)
    : model_(&model), max_tokens_(max_tokens), lengths_(sequences, 0) {
  const LlamaConfig& c = model.config();
  const Context& ctx = model.context();
  const DType dtype = model.dtype();
  Tensor positions = Tensor::Empty({max_tokens}, DType::kI32);
  for (int64_t t = 0; t < max_tokens; ++t) positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  positions_ = CopyToDevice(ctx, positions, ctx.device());
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Shape shape = {sequences * max_tokens, model.layout().kv_heads, c.head_dim};
    cache_.push_back(
        {Tensor::Empty(shape, dtype, ctx.device()), Tensor::Empty(shape, dtype, ctx.device())});
  }
}

absl::StatusOr<Tensor> LlamaDecoder::Append(const std::vector<int32_t>& tokens,
                                            int64_t logit_rows) {
  std::vector<std::vector<int32_t>> batch(lengths_.size());
  batch[0] = tokens;
  return AppendBatch(batch, logit_rows);
}

absl::StatusOr<Tensor> LlamaDecoder::AppendBatch(const std::vector<std::vector<int32_t>>& tokens,
                                                 int64_t logit_rows) {
  const LlamaConfig& c = model_->config();
  if (tokens.size() != lengths_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens for ", tokens.size(), " sequences: the decoder holds ", lengths_.size()));
  }
  if (logit_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the logits of the last ", logit_rows, " tokens: ask for at least 1"));
  }
  std::vector<Segment> segments;
  std::vector<int32_t> all;  // the call's ids, sequence by sequence
  for (int64_t b = 0; b < sequences(); ++b) {
    const int64_t n = static_cast<int64_t>(tokens[b].size());
    if (n == 0) continue;
    const std::string which = sequences() > 1 ? absl::StrCat(" of sequence ", b) : "";
    if (lengths_[b] + n > max_tokens_) {
      return absl::OutOfRangeError(absl::StrCat("appending ", n, " tokens to ", lengths_[b], which,
                                                " would exceed the decoder's ", max_tokens_));
    }
    for (const int32_t id : tokens[b]) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", id, which, " is outside the model's vocabulary [0, ", c.vocab_size, ")"));
      }
    }
    segments.push_back({b, lengths_[b], n, static_cast<int64_t>(all.size())});
    all.insert(all.end(), tokens[b].begin(), tokens[b].end());
  }
  if (all.empty()) return absl::InvalidArgumentError("no tokens to append");
  const int64_t rows = static_cast<int64_t>(all.size());
  Tensor ids = Tensor::Empty({rows}, DType::kI32);
  std::copy(all.begin(), all.end(), ids.data<int32_t>());
  const Context& ctx = model_->context();
  const Tensor& embedding = model_->end_weights().embedding;
  const DType dtype = embedding.dtype();
  const LlamaShardLayout& shard = model_->layout();
  // Vocab-parallel: each rank's rows of the table, zero elsewhere, summed over the group.
  Tensor x = Tensor::Empty({rows, c.hidden_size}, dtype, ctx.device());  // [N, D]
  ops::EmbeddingForward(ctx, CopyToDevice(ctx, ids, ctx.device()), embedding, shard.vocab_begin, x);
  parallel::ReduceFromTensorParallelRegion(model_->tp(), x);
  // LongRoPE's factors and dynamic NTK's base are picked per call from the call's largest
  // position, as transformers does; the cache holds rotated keys, so each key keeps the
  // frequencies of the call that appended it (as transformers' cache does).
  int64_t largest = 0;
  for (const Segment& s : segments) largest = std::max(largest, s.start + s.n - 1);
  const Tensor inv_freq = model_->rope_frequencies().ForCall(ctx, largest);
  for (int64_t l = 0; l < c.num_layers; ++l) Layer(l, segments, inv_freq, x);
  const Tensor last = LastRows(segments, logit_rows, x);  // [R, D]
  const int64_t logit_count = last.dim(0);
  Tensor h = Tensor::Empty(last.shape(), dtype, ctx.device());
  Tensor rstd = Tensor::Empty({logit_count}, AccumDType(dtype), ctx.device());
  ops::RmsNormForward(ctx, last, model_->end_weights().final_norm, c.rms_norm_eps, h, rstd);
  Tensor local = Tensor::Empty({logit_count, shard.vocab}, dtype, ctx.device());  // [R, V / TP]
  Linear(ctx, h, model_->end_weights().lm_head, local);
  logits_ = parallel::GatherFromTensorParallelRegion(ctx, model_->tp(), local);
  for (const Segment& segment : segments) lengths_[segment.sequence] += segment.n;
  return logits_;
}

Tensor LlamaDecoder::LastRows(const std::vector<Segment>& segments, int64_t logit_rows,
                              const Tensor& x) const {
  int64_t count = 0;
  for (const Segment& s : segments) count += std::min(s.n, logit_rows);
  if (count == x.dim(0)) return x;
  const Context& ctx = model_->context();
  Tensor last = Tensor::Empty({count, x.dim(1)}, x.dtype(), ctx.device());  // [R, D]
  int64_t row = 0;
  for (const Segment& s : segments) {
    const int64_t n = std::min(s.n, logit_rows);
    Tensor target = last.Slice(row, row + n);
    CopyTensor(ctx, x.Slice(s.row + s.n - n, s.row + s.n), target);
    row += n;
  }
  return last;
}

void LlamaDecoder::Layer(int64_t layer, const std::vector<Segment>& segments,
                         const Tensor& inv_freq, Tensor& x) {
  const LlamaConfig& c = model_->config();
  const Context& ctx = model_->context();
  const DType dtype = x.dtype(), accum = AccumDType(dtype);
  const Device device = ctx.device();
  const LlamaShardLayout& shard = model_->layout();
  const int64_t rows = x.dim(0), heads = shard.heads, g = shard.kv_heads, d = c.head_dim;
  const ssa::SsaOptions& options = model_->layer().attention_options();
  const LlamaLayerWeights& w = model_->layer_weights(layer);
  CacheKeys keys(*this, cache_[layer], segments, inv_freq);
  const auto empty = [&](bool needed, const Shape& shape, DType type) {
    return needed ? Tensor::Empty(shape, type, device) : Tensor();
  };
  // The call's activations: the residual adds in place on x, one norm buffer for both norms.
  LlamaLayerActivations a;
  a.x = a.x_mid = x;                                   // [N, D]
  a.h_attn = a.h_mlp = empty(true, x.shape(), dtype);  // [N, D]
  a.rstd_attn = a.rstd_mlp = empty(true, {rows}, accum);
  a.u = empty(true, {rows, heads, d}, dtype);
  if (keys.Direct()) {  // the projections write the cache rows
    const Segment& s = segments[0];
    a.k = keys.Cached(cache_[layer].k, s, s.start, s.start + s.n);  // [N, G, d]
    a.v = keys.Cached(cache_[layer].v, s, s.start, s.start + s.n);
  } else {
    a.k = empty(true, {rows, g, d}, dtype);
    a.v = empty(true, {rows, g, d}, dtype);
  }
  a.query_source = empty(w.query_projection.defined(), {rows, heads, d}, dtype);
  a.value_source = empty(w.value_projection.defined(), {rows, g, d}, dtype);
  a.attn = empty(true, {rows, heads, d}, dtype);
  a.lse = empty(true, {rows, heads}, accum);
  a.tau_q = empty(options.query_temperature, {rows, heads}, accum);
  a.tau_v = empty(options.value_temperature, {rows, g}, accum);
  a.gate = empty(true, {rows, shard.ffn}, dtype);  // [N, F / TP]
  a.up = empty(true, {rows, shard.ffn}, dtype);
  a.act = empty(true, {rows, shard.ffn}, dtype);
  Tensor projected = empty(true, x.shape(), dtype);  // [N, D] the row-parallel partial sums
  const LlamaTokenRegions regions(model_->tp(), /*sequence_parallel=*/false, c.rms_norm_eps,
                                  /*scratch=*/nullptr);
  model_->layer().Forward(ctx, w, regions, keys, a, projected, x);
  if (!observer_ || !c.ssa.has_value()) return;
  const auto rows_of = [](const Tensor& t, const Segment& s) {
    return t.defined() ? t.Slice(s.row, s.row + s.n) : Tensor();
  };
  for (const Segment& s : segments) {
    observer_(layer, positions_.Slice(s.start, s.start + s.n), rows_of(a.tau_q, s),
              rows_of(a.tau_v, s));
  }
}

}  // namespace kelvin::models
