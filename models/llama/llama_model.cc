// Llama-3 forward and explicit backward on the op library and the SSA operator, HF checkpoint
// import and export.
#include "models/llama/llama_model.h"

#include <filesystem>
#include <fstream>
#include <random>

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

LlamaModel::LlamaModel(const LlamaConfig& config, DType dtype)
    : config_(config), attention_options_(config.AttentionOptions()), dtype_(dtype) {
  const int64_t d_model = config.hidden_size, f = config.intermediate_size;
  params_.Declare(kEmbed, {config.vocab_size, d_model}, ParamGroup::kDecay);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    params_.Declare(LayerParam(l, "input_layernorm.weight"), {d_model}, ParamGroup::kNoDecay);
    params_.Declare(LayerParam(l, "self_attn.q_proj.weight"), {config.q_size(), d_model},
                    ParamGroup::kDecay);
    params_.Declare(LayerParam(l, "self_attn.k_proj.weight"), {config.kv_size(), d_model},
                    ParamGroup::kDecay);
    params_.Declare(LayerParam(l, "self_attn.v_proj.weight"), {config.kv_size(), d_model},
                    ParamGroup::kDecay);
    params_.Declare(LayerParam(l, "self_attn.o_proj.weight"), {d_model, config.q_size()},
                    ParamGroup::kDecay);
    params_.Declare(LayerParam(l, "post_attention_layernorm.weight"), {d_model},
                    ParamGroup::kNoDecay);
    params_.Declare(LayerParam(l, "mlp.gate_proj.weight"), {f, d_model}, ParamGroup::kDecay);
    params_.Declare(LayerParam(l, "mlp.up_proj.weight"), {f, d_model}, ParamGroup::kDecay);
    params_.Declare(LayerParam(l, "mlp.down_proj.weight"), {d_model, f}, ParamGroup::kDecay);
    for (const SsaParameterSpec& spec : SsaLayerParameters(config)) {
      params_.Declare(LayerParam(l, spec.suffix), spec.shape, spec.group);
    }
  }
  params_.Declare(kFinalNorm, {d_model}, ParamGroup::kNoDecay);
  if (!config.tie_word_embeddings) {
    params_.Declare(kLmHead, {config.vocab_size, d_model}, ParamGroup::kDecay);
  }
  params_.Allocate(dtype);
  inv_freq_ = ops::RopeInverseFrequencies(config.rope, config.head_dim, AccumDType(dtype));
  InitSsaParameters();
}

void LlamaModel::InitSsaParameters() {
  if (!config_.ssa.has_value()) return;
  const Context ctx = Context::Cpu();
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    for (const SsaParameterSpec& spec : SsaLayerParameters(config_)) {
      Tensor& value = params_.value(LayerParam(l, spec.suffix));
      if (spec.suffix == "self_attn.ssa.alpha") {
        ops::Fill(ctx, value, config_.ssa->alpha_init);
      } else if (spec.suffix == "self_attn.ssa.query_temperature_proj.weight") {
        CopyTensor(ctx, params_.value(LayerParam(l, "self_attn.q_proj.weight")), value);
      } else if (spec.suffix == "self_attn.ssa.value_temperature_proj.weight") {
        CopyTensor(ctx, params_.value(LayerParam(l, "self_attn.v_proj.weight")), value);
      } else {
        ops::Fill(ctx, value, 0.0);  // the read-outs a^q [H, d], a^v [G, d]
      }
    }
  }
}

void LlamaModel::InitRandom(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.02);
  for (const ParameterSet::Entry& e : params_.entries()) {
    ops::DispatchCpuFloat(e.value.dtype(), "InitRandom", [&]<typename T>() {
      T* value = e.value.data<T>();
      for (int64_t i = 0; i < e.value.numel(); ++i) {
        value[i] = static_cast<T>(e.group == ParamGroup::kNoDecay ? 1.0 : normal(rng));
      }
    });
  }
  InitSsaParameters();
}

absl::Status LlamaModel::LoadHfCheckpoint(const io::HfCheckpoint& checkpoint) {
  const Context ctx = Context::Cpu();
  const int64_t ssa_tensors =
      config_.num_layers * static_cast<int64_t>(SsaLayerParameters(config_).size());
  std::vector<std::string> missing_ssa;
  for (const ParameterSet::Entry& e : params_.entries()) {
    const io::SafetensorsEntry* found = checkpoint.Find(e.name);
    if (found == nullptr && e.name.find(".self_attn.ssa.") != std::string::npos) {
      missing_ssa.push_back(e.name);
      continue;
    }
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(checkpoint.path(), " has no tensor \"", e.name, "\", which a Llama with ",
                       config_.num_layers, " layers needs (is config.json from the same model?)"));
    }
    if (found->shape != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint.path(), ": tensor \"", e.name, "\" has shape ", ShapeToString(found->shape),
          " but the config implies ", ShapeToString(e.shape)));
    }
    KELVIN_ASSIGN_OR_RETURN(const Tensor loaded, checkpoint.Read(e.name, dtype_));
    Tensor value = e.value;
    CopyTensor(ctx, loaded, value);
  }
  if (static_cast<int64_t>(missing_ssa.size()) == ssa_tensors && ssa_tensors > 0) {
    KLOG_RANK0(INFO) << checkpoint.path() << " has no SSA tensors: starting SSA from read-outs 0 "
                     << "and alpha " << config_.ssa->alpha_init << " (the pretrained model's logits)";
    InitSsaParameters();
  } else if (!missing_ssa.empty()) {
    return absl::NotFoundError(absl::StrCat(
        checkpoint.path(), " has some SSA tensors but not \"", missing_ssa.front(),
        "\": was it exported with other model.ssa flags? Use the same flags, or a checkpoint "
        "without SSA tensors to start SSA afresh"));
  }
  for (const std::string& name : checkpoint.TensorNames()) {
    if (!(name == kLmHead && config_.tie_word_embeddings) &&
        std::none_of(params_.entries().begin(), params_.entries().end(),
                     [&](const ParameterSet::Entry& e) { return e.name == name; })) {
      KLOG(WARNING) << checkpoint.path() << ": ignoring tensor \"" << name
                    << "\", which Kelvin's Llama does not use";
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::ExportHf(const std::string& directory) const {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create export directory ", directory, ": ", error.message()));
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const ParameterSet::Entry& e : params_.entries()) {
    Tensor f32 = Tensor::Empty(e.shape, DType::kF32);
    ops::Cast(Context::Cpu(), e.value, f32);
    tensors.emplace_back(e.name, f32);
  }
  KELVIN_RETURN_IF_ERROR(io::WriteHfCheckpoint(directory, tensors));
  if (config_.ssa.has_value()) {
    KLOG_RANK0(WARNING) << "exported to " << directory << " with the SSA tensors "
                        << "(model.layers.*.self_attn.ssa.*): Kelvin reloads them; transformers has "
                        << "no SSA, ignores them and runs the model without temperatures";
  }
  const std::string config_path = directory + "/config.json";
  std::ofstream out(config_path);
  out << LlamaConfigToHfJson(config_);
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", config_path));
  return absl::OkStatus();
}

void LlamaModel::AllocateActivations(int64_t batch, int64_t seq) {
  if (batch == batch_ && seq == seq_) return;
  batch_ = batch;
  seq_ = seq;
  const int64_t n = batch * seq, d_model = config_.hidden_size, f = config_.intermediate_size;
  const int64_t h = config_.num_attention_heads, g = config_.num_key_value_heads,
                d = config_.head_dim;
  const DType acc = AccumDType(dtype_);
  const ssa::SsaOptions& o = attention_options_;
  const bool own_sources = !o.weight_sharing && o.token_aware;
  auto act = [&](const Shape& shape, DType dtype) { return Tensor::Empty(shape, dtype); };
  auto maybe = [&](bool needed, const Shape& shape, DType dtype) {
    return needed ? Tensor::Empty(shape, dtype) : Tensor();
  };
  tokens_ = act({n}, DType::kI32);
  positions_ = act({n}, DType::kI32);
  layers_.assign(static_cast<size_t>(config_.num_layers), {});
  for (LlamaLayerActivations& a : layers_) {
    a = {act({n, d_model}, dtype_),
         act({n, d_model}, dtype_),
         act({n}, acc),
         act({n, h, d}, dtype_),
         act({n, g, d}, dtype_),
         act({n, g, d}, dtype_),
         act({n, h, d}, dtype_),
         act({n, h}, acc),
         maybe(o.query_temperature, {n, h}, acc),
         maybe(o.value_temperature, {n, g}, acc),
         maybe(own_sources && o.query_temperature, {n, h, d}, dtype_),
         maybe(own_sources && o.value_temperature, {n, g, d}, dtype_),
         act({n, d_model}, dtype_),
         act({n, d_model}, dtype_),
         act({n}, acc),
         act({n, f}, dtype_),
         act({n, f}, dtype_),
         act({n, f}, dtype_)};
  }
  x_final_ = act({n, d_model}, dtype_);
  h_final_ = act({n, d_model}, dtype_);
  rstd_final_ = act({n}, acc);
  logits_ = act({n, config_.vocab_size}, dtype_);
  dx_ = act({n, d_model}, dtype_);
  dh_ = act({n, d_model}, dtype_);
  d_proj_ = act({n, d_model}, dtype_);
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
  auto bytes = [](std::initializer_list<const Tensor*> tensors) {
    int64_t sum = 0;
    for (const Tensor* t : tensors) sum += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
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
      bytes({&dx_, &dh_, &d_proj_, &du_, &dattn_, &dk_, &dv_, &dquery_source_, &dvalue_source_,
             &dgate_, &dup_, &dact_});
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
  ops::EmbeddingForward(ctx, tokens_, params_.value(kEmbed), 0, layers_[0].x);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    Tensor& out = l + 1 < config_.num_layers ? layers_[l + 1].x : x_final_;
    LayerForward(ctx, l, layers_[l].x, out);
  }
  ops::RmsNormForward(ctx, x_final_, params_.value(kFinalNorm), config_.rms_norm_eps, h_final_,
                      rstd_final_);
  Linear(ctx, h_final_, LmHead(), logits_);
  return logits_;
}

void LlamaModel::LayerForward(const Context& ctx, int64_t layer, const Tensor& x_in,
                              Tensor& x_out) {
  LlamaLayerActivations& a = layers_[layer];
  auto w = [&](std::string_view suffix) -> const Tensor& {
    return params_.value(LayerParam(layer, suffix));
  };
  const int64_t n = x_in.dim(0);
  ops::RmsNormForward(ctx, x_in, w("input_layernorm.weight"), config_.rms_norm_eps, a.h_attn,
                      a.rstd_attn);
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
  Linear(ctx, a.attn.View({n, -1}), w("self_attn.o_proj.weight"), d_proj_);
  ops::Add(ctx, x_in, d_proj_, a.x_mid);
  ops::RmsNormForward(ctx, a.x_mid, w("post_attention_layernorm.weight"), config_.rms_norm_eps,
                      a.h_mlp, a.rstd_mlp);
  Linear(ctx, a.h_mlp, w("mlp.gate_proj.weight"), a.gate);
  Linear(ctx, a.h_mlp, w("mlp.up_proj.weight"), a.up);
  ops::SwiGluForward(ctx, a.gate, a.up, a.act);
  Linear(ctx, a.act, w("mlp.down_proj.weight"), d_proj_);
  ops::Add(ctx, a.x_mid, d_proj_, x_out);
}

void LlamaModel::Backward(const Context& ctx, const Tensor& dlogits) {
  KELVIN_CHECK(dlogits.shape() == logits_.shape())
      << "Backward needs dlogits " << ShapeToString(logits_.shape()) << ", got "
      << dlogits.ToString();
  LinearBackward(ctx, dlogits, h_final_, LmHead(), dh_, false, LmHeadGrad());
  ops::RmsNormBackward(ctx, dh_, x_final_, params_.value(kFinalNorm), rstd_final_, dx_,
                       params_.grad(kFinalNorm));
  for (int64_t l = config_.num_layers - 1; l >= 0; --l) LayerBackward(ctx, l, dx_);
  ops::EmbeddingBackward(ctx, tokens_, dx_, 0, params_.grad(kEmbed));
}

void LlamaModel::LayerBackward(const Context& ctx, int64_t layer, Tensor& dx) {
  LlamaLayerActivations& a = layers_[layer];
  auto w = [&](std::string_view suffix) -> const Tensor& {
    return params_.value(LayerParam(layer, suffix));
  };
  auto dw = [&](std::string_view suffix) -> Tensor& {
    return params_.grad(LayerParam(layer, suffix));
  };
  const int64_t n = dx.dim(0);
  // MLP: x_out = x_mid + down(SwiGLU(gate(h), up(h))), h = RMSNorm(x_mid). dx holds d x_out.
  LinearBackward(ctx, dx, a.act, w("mlp.down_proj.weight"), dact_, false,
                 dw("mlp.down_proj.weight"));
  ops::SwiGluBackward(ctx, dact_, a.gate, a.up, dgate_, dup_);
  LinearBackward(ctx, dgate_, a.h_mlp, w("mlp.gate_proj.weight"), dh_, false,
                 dw("mlp.gate_proj.weight"));
  LinearBackward(ctx, dup_, a.h_mlp, w("mlp.up_proj.weight"), dh_, true, dw("mlp.up_proj.weight"));
  ops::RmsNormBackward(ctx, dh_, a.x_mid, w("post_attention_layernorm.weight"), a.rstd_mlp, d_proj_,
                       dw("post_attention_layernorm.weight"));
  ops::Add(ctx, dx, d_proj_, dx);  // dx now holds d x_mid
  // Attention: x_mid = x + o_proj(SsaAttention(q(h), k(h), v(h))), h = RMSNorm(x); the operator
  // applies RoPE and the temperatures.
  Tensor dattn = dattn_.View({n, -1});
  LinearBackward(ctx, dx, a.attn.View({n, -1}), w("self_attn.o_proj.weight"), dattn, false,
                 dw("self_attn.o_proj.weight"));
  // The operator accumulates into its gradients.
  for (Tensor* t : {&du_, &dk_, &dv_, &dquery_source_, &dvalue_source_}) {
    if (t->defined()) ops::Fill(ctx, *t, 0.0);
  }
  ssa::SsaAttentionGrads grads{du_, dk_, dv_, dquery_source_, dvalue_source_,
                               AttentionParameters(layer, true)};
  const ssa::SsaAttentionOutputs saved{a.attn, a.lse, a.tau_q, a.tau_v};
  ssa::SsaAttentionBackward(ctx, attention_options_, ssa::SsaBlockShape::Full(batch_, seq_),
                            dattn_, AttentionInputs(layer), AttentionParameters(layer, false), saved,
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
  ops::RmsNormBackward(ctx, dh_, a.x, w("input_layernorm.weight"), a.rstd_attn, d_proj_,
                       dw("input_layernorm.weight"));
  ops::Add(ctx, dx, d_proj_, dx);  // dx now holds d x (the layer input)
}

}  // namespace kelvin::models
