// The decoder's layer: the training forward's ops on the appended tokens of every sequence at
// once, the attention per sequence: its query block at [start, start + n) against its cached keys
// [0, start + n), which hold k~ and v~ (each row rotated and scaled once, when it was appended).
#include "models/llama/llama_decoder.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "ssa/ssa_attention.h"

namespace kelvin::models {
namespace {

// y [N, out] = x [N, in] W^T (Hugging Face's Linear layout).
void Linear(const Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  ops::Gemm(ctx, x, false, w, true, y);
}

}  // namespace

absl::StatusOr<LlamaDecoder> LlamaDecoder::Create(const LlamaModel& model, int64_t max_tokens,
                                                  int64_t sequences) {
  if (model.stage().stages > 1) {
    return absl::UnimplementedError(
        "decoding runs every layer on each rank: this model is split into pipeline stages (decode "
        "with tensor parallelism or one process)");
  }
  const LlamaConfig& config = model.config();
  if (max_tokens < 1 || max_tokens > config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("a decoder of ", max_tokens, " tokens: the model's positions are [1, ",
                     config.max_position_embeddings, "] (max_position_embeddings)"));
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
  inv_freq_ = CopyToDevice(ctx, ops::RopeInverseFrequencies(c.rope, c.head_dim, AccumDType(dtype)),
                           ctx.device());
  if (c.rope.type == ops::RopeType::kLongrope) {
    inv_freq_long_ = CopyToDevice(
        ctx, ops::RopeInverseFrequencies(c.rope, c.head_dim, AccumDType(dtype), /*long=*/true),
        ctx.device());
  }
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
  for (int64_t l = 0; l < c.num_layers; ++l) Layer(l, segments, x);
  const Tensor last = LastRows(segments, logit_rows, x);  // [R, D]
  const int64_t logit_count = last.dim(0);
  Tensor h = Tensor::Empty(last.shape(), dtype, ctx.device());
  Tensor rstd = Tensor::Empty({logit_count}, AccumDType(dtype), ctx.device());
  ops::RmsNormForward(ctx, last, model_->end_weights().final_norm, c.rms_norm_eps, h, rstd);
  Tensor local = Tensor::Empty({logit_count, shard.vocab}, dtype, ctx.device());  // [R, V / TP]
  Linear(ctx, h, model_->end_weights().lm_head, local);
  logits_ = GatherVocabulary(local);
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

Tensor LlamaDecoder::GatherVocabulary(const Tensor& local) {
  parallel::Communicator& tp = model_->tp();
  if (tp.size() == 1) return local;
  const Context& ctx = model_->context();
  const int64_t rows = local.dim(0), vocab = local.dim(1), ranks = tp.size();
  // Every rank's slice [TP][R][V / TP] on the host, then each row's slices side by side.
  const Tensor mine = local.is_cpu() ? local : CopyToDevice(ctx, local, Device::Cpu());
  Tensor slices = Tensor::Empty({ranks * rows * vocab}, local.dtype());
  tp.AllGather(mine.View({-1}), slices);
  Tensor full = Tensor::Empty({rows, ranks * vocab}, local.dtype());  // [R, V]
  const size_t element = DTypeSize(local.dtype());
  const auto* from = static_cast<const char*>(slices.raw_data());
  auto* to = static_cast<char*>(full.raw_data());
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(to + (row * ranks + r) * vocab * element,
                  from + (r * rows + row) * vocab * element, vocab * element);
    }
  }
  return ctx.is_cuda() ? CopyToDevice(ctx, full, ctx.device()) : full;
}

void LlamaDecoder::Layer(int64_t layer, const std::vector<Segment>& segments, Tensor& x) {
  const LlamaConfig& c = model_->config();
  const Context& ctx = model_->context();
  const DType dtype = x.dtype(), accum = AccumDType(dtype);
  const Device device = ctx.device();
  const LlamaShardLayout& shard = model_->layout();
  const int64_t rows = x.dim(0), h_count = shard.heads, g = shard.kv_heads, d = c.head_dim;
  const ssa::SsaOptions options = c.AttentionOptions();
  const LlamaLayerWeights& w = model_->layer_weights(layer);
  LayerCache& cache = cache_[layer];
  const auto cached = [&](const Tensor& t, const Segment& s, int64_t begin, int64_t end) {
    return t.Slice(s.sequence * max_tokens_ + begin, s.sequence * max_tokens_ + end);
  };

  Tensor h = Tensor::Empty(x.shape(), dtype, device);
  Tensor rstd = Tensor::Empty({rows}, accum, device);
  ops::RmsNormForward(ctx, x, w.input_norm, c.rms_norm_eps, h, rstd);
  Tensor u = Tensor::Empty({rows, h_count, d}, dtype, device);  // [N, H, d] before RoPE
  Tensor u_rows = u.View({rows, -1});
  Linear(ctx, h, w.q, u_rows);
  // The new keys and values [N, G d], then into each sequence's cache rows (one sequence: the
  // GEMMs write there directly).
  const bool direct = segments.size() == 1;
  const auto project_into_cache = [&](const Tensor& weight, Tensor& cache_rows) {
    if (direct) {
      Tensor target =
          cached(cache_rows, segments[0], segments[0].start, segments[0].start + segments[0].n)
              .View({rows, -1});
      Linear(ctx, h, weight, target);
      return;
    }
    Tensor projected = Tensor::Empty({rows, g * d}, dtype, device);
    Linear(ctx, h, weight, projected);
    for (const Segment& s : segments) {
      Tensor target = cached(cache_rows, s, s.start, s.start + s.n).View({s.n, -1});
      CopyTensor(ctx, projected.Slice(s.row, s.row + s.n), target);
    }
  };
  project_into_cache(w.k, cache.k);
  project_into_cache(w.v, cache.v);
  // The temperature sources [N, H, d] and [N, G, d] without weight sharing.
  const auto project = [&](const Tensor& weight, int64_t heads) {
    if (!weight.defined()) return Tensor();
    Tensor source = Tensor::Empty({rows, heads, d}, dtype, device);
    Tensor source_rows = source.View({rows, -1});
    Linear(ctx, h, weight, source_rows);
    return source;
  };
  const Tensor query_source = project(w.query_projection, h_count);
  const Tensor value_source = project(w.value_projection, g);

  // LongRoPE picks its factors per call from the call's largest position, as transformers does;
  // the cache holds rotated keys, so each key keeps the factors of the call that appended it (as
  // transformers' cache does).
  int64_t largest = 0;
  for (const Segment& s : segments) largest = std::max(largest, s.start + s.n - 1);
  const Tensor& inv_freq = ops::RopeUsesLongFactors(c.rope, largest) ? inv_freq_long_ : inv_freq_;
  Tensor attention = Tensor::Empty({rows, h_count, d}, dtype, device);  // [N, H, d]
  for (const Segment& s : segments) {
    const int64_t end = s.start + s.n;
    // The appended rows become k~ and v~ in place, once: every later call reads them as they are.
    Tensor new_k = cached(cache.k, s, s.start, end), new_v = cached(cache.v, s, s.start, end);
    Tensor tau_v = options.value_temperature ? Tensor::Empty({s.n, g}, accum, device) : Tensor();
    ssa::PrepareKeysAndValues(
        ctx, options, new_k, new_v,
        value_source.defined() ? value_source.Slice(s.row, s.row + s.n) : Tensor(),
        positions_.Slice(s.start, end), inv_freq, w.ssa.value_readout, new_k, new_v, tau_v,
        ops::RopeAttentionFactor(c.rope));
    ssa::SsaAttentionInputs inputs{
        u.Slice(s.row, s.row + s.n),
        positions_.Slice(s.start, end),
        query_source.defined() ? query_source.Slice(s.row, s.row + s.n) : Tensor(),
        cached(cache.k, s, 0, end),
        cached(cache.v, s, 0, end),
        positions_.Slice(0, end),
        Tensor(),
        inv_freq,
        ops::RopeAttentionFactor(c.rope)};
    inputs.keys_prepared = true;
    ssa::SsaAttentionOutputs outputs{
        attention.Slice(s.row, s.row + s.n), Tensor::Empty({s.n, h_count}, accum, device),
        options.query_temperature ? Tensor::Empty({s.n, h_count}, accum, device) : Tensor(),
        Tensor()};
    ssa::SsaAttentionForward(ctx, options, {1, s.start, s.n, 0, end}, inputs, w.ssa, outputs);
    if (observer_ && c.ssa.has_value()) {
      observer_(layer, positions_.Slice(s.start, end), outputs.query_temperature, tau_v);
    }
  }

  // x [n, D] += the attention's projection, then += the MLP's (elementwise ops, in place); both
  // row-parallel, their partial sums reduced over the tensor-parallel group.
  Tensor projected = Tensor::Empty(x.shape(), dtype, device);
  Linear(ctx, attention.View({rows, -1}), w.o, projected);
  parallel::ReduceFromTensorParallelRegion(model_->tp(), projected);
  ops::Add(ctx, x, projected, x);
  ops::RmsNormForward(ctx, x, w.post_norm, c.rms_norm_eps, h, rstd);
  Tensor gate = Tensor::Empty({rows, shard.ffn}, dtype, device);  // [N, F / TP]
  Tensor up = Tensor::Empty({rows, shard.ffn}, dtype, device);
  Linear(ctx, h, w.gate, gate);
  Linear(ctx, h, w.up, up);
  Tensor act = Tensor::Empty({rows, shard.ffn}, dtype, device);
  ops::SwiGluForward(ctx, gate, up, act);
  Linear(ctx, act, w.down, projected);
  parallel::ReduceFromTensorParallelRegion(model_->tp(), projected);
  ops::Add(ctx, x, projected, x);
}

}  // namespace kelvin::models
