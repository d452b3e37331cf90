// The decoder's layer: the training forward's ops on the appended tokens, the attention a query
// block at [start, start + n) against the cached keys [0, start + n).
#include "models/llama/llama_decoder.h"

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "ssa/ssa_attention.h"

namespace kelvin::models {
namespace {

// y [N, out] = x [N, in] W^T (Hugging Face's Linear layout).
void Linear(const Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  ops::Gemm(ctx, x, false, w, true, y);
}

}  // namespace

absl::StatusOr<LlamaDecoder> LlamaDecoder::Create(const LlamaModel& model, int64_t max_tokens) {
  if (model.tp() != nullptr || model.stage().stages > 1) {
    return absl::UnimplementedError(
        "decoding runs a whole model on one rank: this model is sharded by tensor or pipeline "
        "parallelism (run generation with one process)");
  }
  const LlamaConfig& config = model.config();
  if (max_tokens < 1 || max_tokens > config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("a decoder of ", max_tokens, " tokens: the model's positions are [1, ",
                     config.max_position_embeddings, "] (max_position_embeddings)"));
  }
  return LlamaDecoder(model, max_tokens);
}

LlamaDecoder::LlamaDecoder(const LlamaModel& model, int64_t max_tokens)
    : model_(&model), max_tokens_(max_tokens) {
  const LlamaConfig& c = model.config();
  const Context& ctx = model.context();
  const DType dtype = model.parameters().Get(kEmbeddingName).value.dtype();
  Tensor positions = Tensor::Empty({max_tokens}, DType::kI32);
  for (int64_t t = 0; t < max_tokens; ++t) positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  positions_ = CopyToDevice(ctx, positions, ctx.device());
  inv_freq_ = CopyToDevice(ctx, ops::RopeInverseFrequencies(c.rope, c.head_dim, AccumDType(dtype)),
                           ctx.device());
  const ParameterSet& params = model.parameters();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const auto weight = [&](std::string_view suffix) {
      const std::string name = LayerParameterName(l, suffix);
      return params.Contains(name) ? params.Get(name).value : Tensor();
    };
    weights_.push_back({weight("input_layernorm.weight"),
                        weight("self_attn.q_proj.weight"),
                        weight("self_attn.k_proj.weight"),
                        weight("self_attn.v_proj.weight"),
                        weight("self_attn.o_proj.weight"),
                        weight("post_attention_layernorm.weight"),
                        weight("mlp.gate_proj.weight"),
                        weight("mlp.up_proj.weight"),
                        weight("mlp.down_proj.weight"),
                        weight("self_attn.ssa.query_temperature_proj.weight"),
                        weight("self_attn.ssa.value_temperature_proj.weight"),
                        {weight("self_attn.ssa.query_readout"),
                         weight("self_attn.ssa.value_readout"), weight("self_attn.ssa.alpha")}});
    const Shape shape = {max_tokens, c.num_key_value_heads, c.head_dim};
    cache_.push_back(
        {Tensor::Empty(shape, dtype, ctx.device()), Tensor::Empty(shape, dtype, ctx.device()),
         weights_.back().value_projection.defined() ? Tensor::Empty(shape, dtype, ctx.device())
                                                    : Tensor()});
  }
}

absl::StatusOr<Tensor> LlamaDecoder::Append(const std::vector<int32_t>& tokens) {
  const LlamaConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return absl::InvalidArgumentError("no tokens to append");
  if (length_ + n > max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("appending ", n, " tokens to ", length_,
                                              " would exceed the decoder's ", max_tokens_));
  }
  Tensor ids = Tensor::Empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", tokens[i], " is outside the model's vocabulary [0, ", c.vocab_size, ")"));
    }
    ids.data<int32_t>()[i] = tokens[i];
  }
  const Context& ctx = model_->context();
  const Tensor& embedding = model_->parameters().Get(kEmbeddingName).value;
  const DType dtype = embedding.dtype();
  Tensor x = Tensor::Empty({n, c.hidden_size}, dtype, ctx.device());
  ops::EmbeddingForward(ctx, CopyToDevice(ctx, ids, ctx.device()), embedding, 0, x);
  for (int64_t l = 0; l < c.num_layers; ++l) Layer(l, length_, x);
  Tensor h = Tensor::Empty(x.shape(), dtype, ctx.device());
  Tensor rstd = Tensor::Empty({n}, AccumDType(dtype), ctx.device());
  ops::RmsNormForward(ctx, x, model_->parameters().Get(kFinalNormName).value, c.rms_norm_eps, h,
                      rstd);
  logits_ = Tensor::Empty({n, c.vocab_size}, dtype, ctx.device());
  Linear(ctx, h,
         model_->parameters().Get(c.tie_word_embeddings ? kEmbeddingName : kLmHeadName).value,
         logits_);
  length_ += n;
  return logits_;
}

void LlamaDecoder::Layer(int64_t layer, int64_t start, Tensor& x) {
  const LlamaConfig& c = model_->config();
  const Context& ctx = model_->context();
  const DType dtype = x.dtype(), accum = AccumDType(dtype);
  const Device device = ctx.device();
  const int64_t n = x.dim(0), end = start + n, h_count = c.num_attention_heads,
                g = c.num_key_value_heads, d = c.head_dim;
  const ssa::SsaOptions options = c.AttentionOptions();
  const LayerWeights& w = weights_[layer];
  LayerCache& cache = cache_[layer];

  Tensor h = Tensor::Empty(x.shape(), dtype, device);
  Tensor rstd = Tensor::Empty({n}, accum, device);
  ops::RmsNormForward(ctx, x, w.input_norm, c.rms_norm_eps, h, rstd);
  Tensor u = Tensor::Empty({n, h_count, d}, dtype, device);  // [n, H, d] before RoPE
  Tensor u_rows = u.View({n, -1});
  Linear(ctx, h, w.q, u_rows);
  Tensor k_new = cache.k.Slice(start, end).View({n, -1});
  Tensor v_new = cache.v.Slice(start, end).View({n, -1});
  Linear(ctx, h, w.k, k_new);
  Linear(ctx, h, w.v, v_new);
  Tensor query_source;  // [n, H, d] without weight sharing
  if (w.query_projection.defined()) {
    query_source = Tensor::Empty({n, h_count, d}, dtype, device);
    Tensor source_rows = query_source.View({n, -1});
    Linear(ctx, h, w.query_projection, source_rows);
  }
  if (cache.value_source.defined()) {
    Tensor source = cache.value_source.Slice(start, end).View({n, -1});
    Linear(ctx, h, w.value_projection, source);
  }

  const ssa::SsaAttentionInputs inputs{
      u,
      positions_.Slice(start, end),
      query_source,
      cache.k.Slice(0, end),
      cache.v.Slice(0, end),
      positions_.Slice(0, end),
      cache.value_source.defined() ? cache.value_source.Slice(0, end) : Tensor(),
      inv_freq_};
  ssa::SsaAttentionOutputs outputs{
      Tensor::Empty({n, h_count, d}, dtype, device), Tensor::Empty({n, h_count}, accum, device),
      options.query_temperature ? Tensor::Empty({n, h_count}, accum, device) : Tensor(),
      options.value_temperature ? Tensor::Empty({end, g}, accum, device) : Tensor()};
  ssa::SsaAttentionForward(ctx, options, {1, start, n, 0, end}, inputs, w.ssa, outputs);
  if (observer_ && c.ssa.has_value()) {
    observer_(layer, positions_.Slice(start, end), outputs.query_temperature,
              outputs.value_temperature.defined() ? outputs.value_temperature.Slice(start, end)
                                                  : Tensor());
  }

  Tensor projected = Tensor::Empty(x.shape(), dtype, device);
  Linear(ctx, outputs.out.View({n, -1}), w.o, projected);
  // x [n, D] += the attention's projection, then += the MLP's (elementwise ops, in place).
  ops::Add(ctx, x, projected, x);
  ops::RmsNormForward(ctx, x, w.post_norm, c.rms_norm_eps, h, rstd);
  Tensor gate = Tensor::Empty({n, c.intermediate_size}, dtype, device);
  Tensor up = Tensor::Empty({n, c.intermediate_size}, dtype, device);
  Linear(ctx, h, w.gate, gate);
  Linear(ctx, h, w.up, up);
  Tensor act = Tensor::Empty({n, c.intermediate_size}, dtype, device);
  ops::SwiGluForward(ctx, gate, up, act);
  Linear(ctx, act, w.down, projected);
  ops::Add(ctx, x, projected, x);
}

}  // namespace kelvin::models
