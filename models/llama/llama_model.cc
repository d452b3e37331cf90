// Llama-3 forward and explicit backward on the op library and the SSA operator, HF checkpoint
// import and export.
#include "models/llama/llama_model.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/logging.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "ssa/ssa_attention.h"

namespace kelvin::models {
namespace {

constexpr const char* kEmbed = "model.embed_tokens.weight";
constexpr const char* kFinalNorm = "model.norm.weight";
constexpr const char* kLmHead = "lm_head.weight";

// y [N, out] = x [N, in] W^T, W [out, in] as Hugging Face stores Linear weights.
void Linear(const Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  ops::Gemm(ctx, x, false, w, true, y);
}

// For y = x W^T: dx (= or +=) dy W, dW += dy^T x.
void LinearBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                    Tensor& dx, bool accumulate_dx, Tensor& dw) {
  ops::GemmBackward(ctx, dy, x, false, w, true, &dx, &dw, accumulate_dx, true);
}

}  // namespace

std::string LlamaModel::LayerParam(int64_t layer, std::string_view suffix) {
  return absl::StrCat("model.layers.", layer, ".", std::string(suffix));
}

LlamaModel::LlamaModel(const LlamaConfig& config, DType dtype, const LlamaParallelism& parallelism)
    : config_(config),
      attention_options_(config.AttentionOptions()),
      dtype_(dtype),
      parallelism_(parallelism),
      layout_(ShardLayoutOf(config, parallelism.tp ? parallelism.tp->rank() : 0,
                            parallelism.tp ? parallelism.tp->size() : 1)) {
  KELVIN_CHECK(!parallelism.sequence_parallel || parallelism.tp != nullptr)
      << "sequence parallelism needs a tensor-parallel group";
  const int64_t d_model = config.hidden_size, f = config.intermediate_size;
  Declare(kEmbed, {config.vocab_size, d_model}, ParamGroup::kDecay);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    Declare(LayerParam(l, "input_layernorm.weight"), {d_model}, ParamGroup::kNoDecay);
    Declare(LayerParam(l, "self_attn.q_proj.weight"), {config.q_size(), d_model},
            ParamGroup::kDecay);
    Declare(LayerParam(l, "self_attn.k_proj.weight"), {config.kv_size(), d_model},
            ParamGroup::kDecay);
    Declare(LayerParam(l, "self_attn.v_proj.weight"), {config.kv_size(), d_model},
            ParamGroup::kDecay);
    Declare(LayerParam(l, "self_attn.o_proj.weight"), {d_model, config.q_size()},
            ParamGroup::kDecay);
    Declare(LayerParam(l, "post_attention_layernorm.weight"), {d_model}, ParamGroup::kNoDecay);
    Declare(LayerParam(l, "mlp.gate_proj.weight"), {f, d_model}, ParamGroup::kDecay);
    Declare(LayerParam(l, "mlp.up_proj.weight"), {f, d_model}, ParamGroup::kDecay);
    Declare(LayerParam(l, "mlp.down_proj.weight"), {d_model, f}, ParamGroup::kDecay);
    for (const SsaParameterSpec& spec : SsaLayerParameters(config)) {
      Declare(LayerParam(l, spec.suffix), spec.shape, spec.group);
    }
  }
  Declare(kFinalNorm, {d_model}, ParamGroup::kNoDecay);
  if (!config.tie_word_embeddings) {
    Declare(kLmHead, {config.vocab_size, d_model}, ParamGroup::kDecay);
  }
  params_.Allocate(dtype);
  inv_freq_ = ops::RopeInverseFrequencies(config.rope, config.head_dim, AccumDType(dtype));
  InitSsaParameters();
}

void LlamaModel::Declare(const std::string& name, const Shape& full_shape, ParamGroup group) {
  const ParameterShard shard = ShardOf(config_, layout_, name);
  Shape local_shape = full_shape;
  if (shard.axis >= 0) local_shape[shard.axis] = shard.count;
  params_.Declare(name, local_shape, group);
  full_shapes_[name] = full_shape;
  shards_[name] = shard;
}

bool LlamaModel::CountsInGradientNorm(const std::string& name) const {
  const parallel::Communicator* tp = parallelism_.tp;
  if (tp == nullptr) return true;
  const ParameterShard& shard = shards_.at(name);
  if (shard.axis < 0) return tp->rank() == 0;  // replicated: count rank 0's copy
  // Replicated KV heads: the first rank holding each head counts it.
  if (shard.replicated_kv) return tp->rank() % (tp->size() / config_.num_key_value_heads) == 0;
  return true;
}

void LlamaModel::FinishGradients() {
  parallel::Communicator* tp = parallelism_.tp;
  if (tp == nullptr) return;
  for (const ParameterSet::Entry& e : params_.entries()) {
    const ParameterShard& shard = shards_.at(e.name);
    Tensor grad = e.grad;
    if (shard.axis < 0 && parallelism_.sequence_parallel) {
      tp->AllReduce(grad, parallel::ReduceOp::kSum);  // each rank saw its own tokens
    } else if (shard.replicated_kv) {
      // Sum over the ranks sharing each KV head: every rank adds its gradient into its head's
      // slot of a [G, ...] buffer, the group sums, each rank takes its head's slot back.
      const int64_t g = config_.num_key_value_heads, per_head = grad.numel();
      Tensor slots = Tensor::ZerosCpu({g * per_head}, grad.dtype());
      Tensor mine = slots.Slice(layout_.kv_begin * per_head, (layout_.kv_begin + 1) * per_head);
      CopyTensor(Context::Cpu(), grad.View({-1}), mine);
      tp->AllReduce(slots, parallel::ReduceOp::kSum);
      Tensor flat = grad.View({-1});
      CopyTensor(Context::Cpu(), mine, flat);
    }
  }
}

int64_t LlamaModel::LocalTokens() const {
  const int64_t n = batch_ * seq_;
  return parallelism_.sequence_parallel ? n / layout_.tp_size : n;
}

Tensor& LlamaModel::ReduceTokens(Tensor& partial) {
  parallel::Communicator* tp = parallelism_.tp;
  if (tp == nullptr) return partial;
  if (!parallelism_.sequence_parallel) {
    tp->AllReduce(partial, parallel::ReduceOp::kSum);
    return partial;
  }
  Tensor local = local_tokens_.View({-1});
  tp->ReduceScatter(partial.View({-1}), local, parallel::ReduceOp::kSum);
  return local_tokens_;
}

const Tensor& LlamaModel::FullTokenGradient(const Tensor& local) {
  if (!parallelism_.sequence_parallel) return local;
  Tensor full = gathered_grad_.View({-1});
  parallelism_.tp->AllGather(local.View({-1}), full);
  return gathered_grad_;
}

void LlamaModel::AllocateActivations(int64_t batch, int64_t seq) {
  if (batch == batch_ && seq == seq_) return;
  batch_ = batch;
  seq_ = seq;
  const int64_t n = batch * seq, nl = LocalTokens(), d_model = config_.hidden_size;
  const int64_t f = layout_.ffn, h = layout_.heads, g = layout_.kv_heads, d = config_.head_dim;
  KELVIN_CHECK(nl * layout_.tp_size == n || !parallelism_.sequence_parallel)
      << "sequence parallelism: B*T=" << n << " tokens do not split over " << layout_.tp_size
      << " tensor-parallel ranks";
  const DType acc = AccumDType(dtype_);
  const ssa::SsaOptions& o = attention_options_;
  const bool own_sources = !o.weight_sharing && o.token_aware;
  const bool sp = parallelism_.sequence_parallel;
  auto act = [&](const Shape& shape, DType dtype) { return Tensor::Empty(shape, dtype); };
  auto maybe = [&](bool needed, const Shape& shape, DType dtype) {
    return needed ? Tensor::Empty(shape, dtype) : Tensor();
  };
  tokens_ = act({n}, DType::kI32);
  positions_ = act({n}, DType::kI32);
  layers_.assign(static_cast<size_t>(config_.num_layers), {});
  for (LlamaLayerActivations& a : layers_) {
    a = {act({nl, d_model}, dtype_),
         act({n, d_model}, dtype_),
         act({nl}, acc),
         act({n, h, d}, dtype_),
         act({n, g, d}, dtype_),
         act({n, g, d}, dtype_),
         act({n, h, d}, dtype_),
         act({n, h}, acc),
         maybe(o.query_temperature, {n, h}, acc),
         maybe(o.value_temperature, {n, g}, acc),
         maybe(own_sources && o.query_temperature, {n, h, d}, dtype_),
         maybe(own_sources && o.value_temperature, {n, g, d}, dtype_),
         act({nl, d_model}, dtype_),
         act({n, d_model}, dtype_),
         act({nl}, acc),
         act({n, f}, dtype_),
         act({n, f}, dtype_),
         act({n, f}, dtype_)};
  }
  x_final_ = act({nl, d_model}, dtype_);
  h_final_ = act({n, d_model}, dtype_);
  rstd_final_ = act({nl}, acc);
  logits_ = act({n, layout_.vocab}, dtype_);
  proj_ = act({n, d_model}, dtype_);
  local_tokens_ = maybe(sp, {nl, d_model}, dtype_);
  gathered_grad_ = maybe(sp, {n, d_model}, dtype_);
  dx_ = act({nl, d_model}, dtype_);
  dh_ = act({n, d_model}, dtype_);
  d_proj_ = sp ? act({nl, d_model}, dtype_) : proj_;
  du_ = act({n, h, d}, dtype_);
  dattn_ = act({n, h, d}, dtype_);
  dk_ = act({n, g, d}, dtype_);
  dv_ = act({n, g, d}, dtype_);
  dquery_source_ = maybe(own_sources && o.query_temperature, {n, h, d}, dtype_);
  dvalue_source_ = maybe(own_sources && o.value_temperature, {n, g, d}, dtype_);
  dgate_ = act({n, f}, dtype_);
  dup_ = act({n, f}, dtype_);
  dact_ = act({n, f}, dtype_);
}

LlamaModel::BufferBytes LlamaModel::AllocatedBufferBytes() const {
  std::set<const void*> counted;  // buffers that alias one another count once
  auto bytes = [&](std::initializer_list<const Tensor*> tensors) {
    int64_t sum = 0;
    for (const Tensor* t : tensors) {
      if (t->defined() && counted.insert(t->raw_data()).second) {
        sum += static_cast<int64_t>(t->nbytes());
      }
    }
    return sum;
  };
  BufferBytes b;
  for (const LlamaLayerActivations& a : layers_) {
    b.activations += bytes({&a.x, &a.h_attn, &a.rstd_attn, &a.u, &a.k, &a.v, &a.attn, &a.lse,
                            &a.tau_q, &a.tau_v, &a.query_source, &a.value_source, &a.x_mid,
                            &a.h_mlp, &a.rstd_mlp, &a.gate, &a.up, &a.act});
  }
  b.activations += bytes({&x_final_, &h_final_, &rstd_final_, &tokens_, &positions_});
  b.logits = bytes({&logits_});
  b.backward_scratch =
      bytes({&dx_, &dh_, &proj_, &d_proj_, &du_, &dattn_, &dk_, &dv_, &dquery_source_,
             &dvalue_source_, &dgate_, &dup_, &dact_, &local_tokens_, &gathered_grad_});
  return b;
}

const Tensor& LlamaModel::LmHead() {
  return params_.value(config_.tie_word_embeddings ? kEmbed : kLmHead);
}

Tensor& LlamaModel::LmHeadGrad() {
  return params_.grad(config_.tie_word_embeddings ? kEmbed : kLmHead);
}

ssa::SsaAttentionInputs LlamaModel::AttentionInputs(int64_t layer) const {
  const LlamaLayerActivations& a = layers_[layer];
  return {a.u, positions_, a.query_source, a.k, a.v, Tensor(), a.value_source, inv_freq_};
}

ssa::SsaParameters LlamaModel::AttentionParameters(int64_t layer, bool gradients) {
  auto get = [&](std::string_view suffix) {
    const std::string name = LayerParam(layer, suffix);
    if (!params_.Contains(name)) return Tensor();
    return gradients ? params_.grad(name) : params_.value(name);
  };
  return {get("self_attn.ssa.query_readout"), get("self_attn.ssa.value_readout"),
          get("self_attn.ssa.alpha")};
}

std::vector<ssa::TemperatureStatistics> LlamaModel::TemperatureStatistics() const {
  std::vector<ssa::TemperatureStatistics> stats;
  if (!config_.ssa.has_value() || layers_.empty()) return stats;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const std::string alpha = LayerParam(l, "self_attn.ssa.alpha");
    const LlamaLayerActivations& a = layers_[l];
    stats.push_back(ssa::ComputeTemperatureStatistics(
        a.tau_q, a.tau_v, params_.Contains(alpha) ? params_.Get(alpha).value : Tensor()));
  }
  return stats;
}

Tensor& LlamaModel::Forward(const Context& ctx, const Tensor& tokens, const Tensor& positions) {
  KELVIN_CHECK(tokens.ndim() == 2 && positions.shape() == tokens.shape())
      << "Forward takes tokens and positions [B, T], got " << tokens.ToString() << " and "
      << positions.ToString();
  AllocateActivations(tokens.dim(0), tokens.dim(1));
  CopyTensor(ctx, tokens.View({-1}), tokens_);
  CopyTensor(ctx, positions.View({-1}), positions_);
  // Vocab-parallel embedding: each rank's rows, zero elsewhere, summed over the group.
  Tensor& embedded = parallelism_.tp ? proj_ : layers_[0].x;
  ops::EmbeddingForward(ctx, tokens_, params_.value(kEmbed), layout_.vocab_begin, embedded);
  if (parallelism_.tp) CopyTensor(ctx, ReduceTokens(proj_), layers_[0].x);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    Tensor& out = l + 1 < config_.num_layers ? layers_[l + 1].x : x_final_;
    LayerForward(ctx, l, layers_[l].x, out);
  }
  NormForward(ctx, x_final_, params_.value(kFinalNorm), h_final_, rstd_final_);
  Linear(ctx, h_final_, LmHead(), logits_);
  return logits_;
}

void LlamaModel::NormForward(const Context& ctx, const Tensor& x, const Tensor& weight, Tensor& h,
                             Tensor& rstd) {
  if (!parallelism_.sequence_parallel) {
    ops::RmsNormForward(ctx, x, weight, config_.rms_norm_eps, h, rstd);
    return;
  }
  ops::RmsNormForward(ctx, x, weight, config_.rms_norm_eps, local_tokens_, rstd);
  parallelism_.tp->AllGather(local_tokens_.View({-1}), h);
}

void LlamaModel::NormBackward(const Context& ctx, Tensor& dh, const Tensor& x, const Tensor& weight,
                              const Tensor& rstd, Tensor& dweight, Tensor& dx) {
  const Tensor& dh_local = ReduceTokens(dh);  // the TP ranks' partial input gradients, summed
  ops::RmsNormBackward(ctx, dh_local, x, weight, rstd, d_proj_, dweight);
  ops::Add(ctx, dx, d_proj_, dx);
}

void LlamaModel::LayerForward(const Context& ctx, int64_t layer, const Tensor& x_in,
                              Tensor& x_out) {
  LlamaLayerActivations& a = layers_[layer];
  auto w = [&](std::string_view suffix) -> const Tensor& {
    return params_.value(LayerParam(layer, suffix));
  };
  const int64_t n = a.h_attn.dim(0);
  NormForward(ctx, x_in, w("input_layernorm.weight"), a.h_attn, a.rstd_attn);
  Tensor u = a.u.View({n, -1}), k = a.k.View({n, -1}), v = a.v.View({n, -1});
  Linear(ctx, a.h_attn, w("self_attn.q_proj.weight"), u);
  Linear(ctx, a.h_attn, w("self_attn.k_proj.weight"), k);
  Linear(ctx, a.h_attn, w("self_attn.v_proj.weight"), v);
  if (a.query_source.defined()) {
    Tensor source = a.query_source.View({n, -1});
    Linear(ctx, a.h_attn, w("self_attn.ssa.query_temperature_proj.weight"), source);
  }
  if (a.value_source.defined()) {
    Tensor source = a.value_source.View({n, -1});
    Linear(ctx, a.h_attn, w("self_attn.ssa.value_temperature_proj.weight"), source);
  }
  ssa::SsaAttentionOutputs outputs{a.attn, a.lse, a.tau_q, a.tau_v};
  ssa::SsaAttentionForward(ctx, attention_options_, ssa::SsaBlockShape::Full(batch_, seq_),
                           AttentionInputs(layer), AttentionParameters(layer, false), outputs);
  Linear(ctx, a.attn.View({n, -1}), w("self_attn.o_proj.weight"), proj_);
  ops::Add(ctx, x_in, ReduceTokens(proj_), a.x_mid);
  NormForward(ctx, a.x_mid, w("post_attention_layernorm.weight"), a.h_mlp, a.rstd_mlp);
  Linear(ctx, a.h_mlp, w("mlp.gate_proj.weight"), a.gate);
  Linear(ctx, a.h_mlp, w("mlp.up_proj.weight"), a.up);
  ops::SwiGluForward(ctx, a.gate, a.up, a.act);
  Linear(ctx, a.act, w("mlp.down_proj.weight"), proj_);
  ops::Add(ctx, a.x_mid, ReduceTokens(proj_), x_out);
}

void LlamaModel::Backward(const Context& ctx, const Tensor& dlogits) {
  KELVIN_CHECK(dlogits.shape() == logits_.shape())
      << "Backward needs dlogits " << ShapeToString(logits_.shape()) << ", got "
      << dlogits.ToString();
  LinearBackward(ctx, dlogits, h_final_, LmHead(), dh_, false, LmHeadGrad());
  ops::Fill(ctx, dx_, 0.0);
  NormBackward(ctx, dh_, x_final_, params_.value(kFinalNorm), rstd_final_, params_.grad(kFinalNorm),
               dx_);
  for (int64_t l = config_.num_layers - 1; l >= 0; --l) LayerBackward(ctx, l, dx_);
  ops::EmbeddingBackward(ctx, tokens_, FullTokenGradient(dx_), layout_.vocab_begin,
                         params_.grad(kEmbed));
}

void LlamaModel::LayerBackward(const Context& ctx, int64_t layer, Tensor& dx) {
  LlamaLayerActivations& a = layers_[layer];
  auto w = [&](std::string_view suffix) -> const Tensor& {
    return params_.value(LayerParam(layer, suffix));
  };
  auto dw = [&](std::string_view suffix) -> Tensor& {
    return params_.grad(LayerParam(layer, suffix));
  };
  const int64_t n = a.h_attn.dim(0);
  // MLP: x_out = x_mid + down(SwiGLU(gate(h), up(h))), h = RMSNorm(x_mid). dx holds d x_out.
  LinearBackward(ctx, FullTokenGradient(dx), a.act, w("mlp.down_proj.weight"), dact_, false,
                 dw("mlp.down_proj.weight"));
  ops::SwiGluBackward(ctx, dact_, a.gate, a.up, dgate_, dup_);
  LinearBackward(ctx, dgate_, a.h_mlp, w("mlp.gate_proj.weight"), dh_, false,
                 dw("mlp.gate_proj.weight"));
  LinearBackward(ctx, dup_, a.h_mlp, w("mlp.up_proj.weight"), dh_, true, dw("mlp.up_proj.weight"));
  NormBackward(ctx, dh_, a.x_mid, w("post_attention_layernorm.weight"), a.rstd_mlp,
               dw("post_attention_layernorm.weight"), dx);  // dx now holds d x_mid
  // Attention: x_mid = x + o_proj(SsaAttention(q(h), k(h), v(h))), h = RMSNorm(x); the operator
  // applies RoPE and the temperatures.
  Tensor dattn = dattn_.View({n, -1});
  LinearBackward(ctx, FullTokenGradient(dx), a.attn.View({n, -1}), w("self_attn.o_proj.weight"),
                 dattn, false, dw("self_attn.o_proj.weight"));
  // The operator accumulates into its gradients.
  for (Tensor* t : {&du_, &dk_, &dv_, &dquery_source_, &dvalue_source_}) {
    if (t->defined()) ops::Fill(ctx, *t, 0.0);
  }
  ssa::SsaAttentionGrads grads{
      du_, dk_, dv_, dquery_source_, dvalue_source_, AttentionParameters(layer, true)};
  const ssa::SsaAttentionOutputs saved{a.attn, a.lse, a.tau_q, a.tau_v};
  ssa::SsaAttentionBackward(ctx, attention_options_, ssa::SsaBlockShape::Full(batch_, seq_), dattn_,
                            AttentionInputs(layer), AttentionParameters(layer, false), saved,
                            grads);
  LinearBackward(ctx, du_.View({n, -1}), a.h_attn, w("self_attn.q_proj.weight"), dh_, false,
                 dw("self_attn.q_proj.weight"));
  LinearBackward(ctx, dk_.View({n, -1}), a.h_attn, w("self_attn.k_proj.weight"), dh_, true,
                 dw("self_attn.k_proj.weight"));
  LinearBackward(ctx, dv_.View({n, -1}), a.h_attn, w("self_attn.v_proj.weight"), dh_, true,
                 dw("self_attn.v_proj.weight"));
  if (dquery_source_.defined()) {
    LinearBackward(ctx, dquery_source_.View({n, -1}), a.h_attn,
                   w("self_attn.ssa.query_temperature_proj.weight"), dh_, true,
                   dw("self_attn.ssa.query_temperature_proj.weight"));
  }
  if (dvalue_source_.defined()) {
    LinearBackward(ctx, dvalue_source_.View({n, -1}), a.h_attn,
                   w("self_attn.ssa.value_temperature_proj.weight"), dh_, true,
                   dw("self_attn.ssa.value_temperature_proj.weight"));
  }
  NormBackward(ctx, dh_, a.x, w("input_layernorm.weight"), a.rstd_attn,
               dw("input_layernorm.weight"), dx);  // dx now holds d x (the layer input)
}

}  // namespace kelvin::models
