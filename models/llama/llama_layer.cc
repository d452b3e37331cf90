// The one Llama layer (llama_layer.h): its forward and explicit backward, and the token regions
// around it.
#include "models/llama/llama_layer.h"

#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/lora.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/swiglu.h"
#include "parallel/tensor_parallel.h"

namespace kelvin::models {
namespace {

// Rows [begin, end) of a query-side tensor (an undefined tensor stays undefined; the whole tensor
// when that is all of it).
Tensor Rows(const Tensor& t, int64_t begin, int64_t end) {
  if (!t.defined() || (begin == 0 && end == t.dim(0))) return t;
  return t.Slice(begin, end);
}

// The call's inputs with its query rows of u and the query source.
ssa::SsaAttentionInputs CallInputs(const LlamaAttentionCall& call, const LlamaLayerActivations& a) {
  ssa::SsaAttentionInputs inputs = call.inputs;
  inputs.u = Rows(a.u, call.query_begin, call.query_end);
  inputs.query_source = Rows(a.query_source, call.query_begin, call.query_end);
  return inputs;
}

// The call's rows of the forward's outputs.
ssa::SsaAttentionOutputs CallOutputs(const LlamaAttentionCall& call,
                                     const LlamaLayerActivations& a) {
  return {Rows(a.attn, call.query_begin, call.query_end),
          Rows(a.lse, call.query_begin, call.query_end),
          Rows(a.tau_q, call.query_begin, call.query_end), call.value_temperature};
}

// The index of a projection's adapter in LlamaLayerWeights::lora.
size_t Target(LoraTarget target) { return static_cast<size_t>(target); }

// out [N, in] = x [N, in] with the dropout mask of (dropout.layer, target) applied (out may be x),
// the input's features counted from this rank's slice of a row-parallel projection's.
void ApplyLoraDropout(const Context& ctx, const Tensor& x, LoraTarget target,
                      const LlamaLoraDropout& dropout, Tensor& out) {
  const uint64_t site = static_cast<uint64_t>(dropout.layer) * kNumLoraTargets + Target(target);
  const int64_t feature_begin = IsColumnParallel(target) ? 0 : dropout.tp_rank * x.dim(1);
  ops::HashedDropout(ctx, x, dropout.token_keys, site, feature_begin, dropout.p, out);
}

// The input x [N, in] of projection `target`'s adapter as it reads it: x itself, or with dropout
// a new [N, in] tensor of x masked.
Tensor LoraInput(const Context& ctx, const Tensor& x, LoraTarget target,
                 const LlamaLoraDropout& dropout) {
  if (!dropout.token_keys.defined()) return x;
  Tensor dropped = Tensor::Empty(x.shape(), x.dtype(), ctx.device());  // [N, in]
  ApplyLoraDropout(ctx, x, target, dropout, dropped);
  return dropped;
}

}  // namespace

void Linear(const Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  ops::Gemm(ctx, x, false, w, true, y);
}

void LinearBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                    Tensor& dx, bool accumulate_dx, Tensor& dw) {
  ops::GemmBackward(ctx, dy, x, false, w, true, &dx, &dw, accumulate_dx, true);
}

void LlamaTokenRegions::NormForward(const Context& ctx, const Tensor& x, const Tensor& weight,
                                    Tensor& h, Tensor& rstd) const {
  if (!sequence_parallel_) {
    ops::RmsNormForward(ctx, x, weight, eps_, h, rstd);
    return;
  }
  ops::RmsNormForward(ctx, x, weight, eps_, scratch_->local_tokens, rstd);
  parallel::GatherFromSequenceParallelRegion(*tp_, scratch_->local_tokens, h);
}

void LlamaTokenRegions::NormBackward(const Context& ctx, Tensor& dh, const Tensor& x,
                                     const Tensor& weight, const Tensor& rstd, Tensor& dweight,
                                     Tensor& dx) const {
  const Tensor& dh_local = ReduceTokens(dh);  // the TP ranks' partial input gradients, summed
  ops::RmsNormBackward(ctx, dh_local, x, weight, rstd, scratch_->d_proj, dweight);
  ops::Add(ctx, dx, scratch_->d_proj, dx);
}

Tensor& LlamaTokenRegions::ReduceTokens(Tensor& partial) const {
  if (!sequence_parallel_) {
    parallel::ReduceFromTensorParallelRegion(*tp_, partial);
    return partial;
  }
  parallel::ReduceScatterToSequenceParallelRegion(*tp_, partial, scratch_->local_tokens);
  return scratch_->local_tokens;
}

const Tensor& LlamaTokenRegions::FullTokenGradient(const Tensor& local) const {
  if (!sequence_parallel_) return local;
  parallel::GatherFromSequenceParallelRegion(*tp_, local, scratch_->gathered_grad);
  return scratch_->gathered_grad;
}

void LlamaAttentionKeys::KeyGradients(const Context& /*ctx*/, LlamaScratch& scratch, Tensor& dk,
                                      Tensor& dv, Tensor& dvalue_source) {
  dk = scratch.dk;
  dv = scratch.dv;
  dvalue_source = scratch.dvalue_source;
}

void LlamaLayer::Project(const Context& ctx, const Tensor& x, const Tensor& weight,
                         const LlamaLayerWeights& w, LoraTarget target,
                         const LlamaLoraDropout& dropout, Tensor& y) const {
  Linear(ctx, x, weight, y);
  const LoraAdapter& lora = w.lora[Target(target)];
  if (!lora.a.defined()) return;
  Tensor z = Tensor::Empty({x.dim(0), lora.a.dim(0)}, x.dtype(), ctx.device());  // [N, r]
  ops::LoraForward(ctx, LoraInput(ctx, x, target, dropout), lora.a, lora.b, lora_scale_, z, y);
}

void LlamaLayer::ProjectBackward(const Context& ctx, const Tensor& dy, const Tensor& x,
                                 const Tensor& weight, const LlamaLayerWeights& w,
                                 LlamaLayerWeights& dw, LoraTarget target,
                                 const LlamaLoraDropout& dropout, Tensor& dx, bool accumulate_dx,
                                 Tensor& dweight) const {
  LinearBackward(ctx, dy, x, weight, dx, accumulate_dx, dweight);
  const LoraAdapter& lora = w.lora[Target(target)];
  if (!lora.a.defined()) return;
  LoraAdapter& dlora = dw.lora[Target(target)];
  const Shape rows = {x.dim(0), lora.a.dim(0)};
  const Tensor input = LoraInput(ctx, x, target, dropout);   // [N, in] x', as the forward's
  Tensor z = Tensor::Empty(rows, x.dtype(), ctx.device());   // [N, r] = x' A^T, as the forward's
  Tensor dz = Tensor::Empty(rows, x.dtype(), ctx.device());  // [N, r]
  Linear(ctx, input, lora.a, z);
  if (!dropout.token_keys.defined()) {
    ops::LoraBackward(ctx, dy, input, lora.a, lora.b, z, lora_scale_, dz, dx, dlora.a, dlora.b);
    return;
  }
  // dx' through the mask again: dx += dropout(dz A).
  Tensor dinput = Tensor::Empty(x.shape(), x.dtype(), ctx.device());  // [N, in]
  ops::Fill(ctx, dinput, 0.0);
  ops::LoraBackward(ctx, dy, input, lora.a, lora.b, z, lora_scale_, dz, dinput, dlora.a, dlora.b);
  ApplyLoraDropout(ctx, dinput, target, dropout, dinput);
  ops::Add(ctx, dx, dinput, dx);
}

void LlamaLayer::AttentionForward(const Context& ctx, const LlamaLayerWeights& w,
                                  LlamaAttentionKeys& keys, LlamaLayerActivations& a) const {
  const int64_t n = a.h_attn.dim(0);
  Tensor u = a.u.View({n, -1}), k = a.k.View({n, -1}), v = a.v.View({n, -1});
  Project(ctx, a.h_attn, w.q, w, LoraTarget::kQ, a.lora_dropout, u);
  Project(ctx, a.h_attn, w.k, w, LoraTarget::kK, a.lora_dropout, k);
  Project(ctx, a.h_attn, w.v, w, LoraTarget::kV, a.lora_dropout, v);
  if (a.query_source.defined()) {
    Tensor source = a.query_source.View({n, -1});
    Linear(ctx, a.h_attn, w.query_projection, source);
  }
  if (a.value_source.defined()) {
    Tensor source = a.value_source.View({n, -1});
    Linear(ctx, a.h_attn, w.value_projection, source);
  }
  keys.PlaceKeys(ctx, w, a);
  for (const LlamaAttentionCall& call : keys.Calls(a)) {
    ssa::SsaAttentionOutputs outputs = CallOutputs(call, a);
    ssa::SsaAttentionForward(ctx, options_, call.shape, CallInputs(call, a), w.ssa, outputs,
                             call.core);
  }
}

void LlamaLayer::MlpForward(const Context& ctx, const LlamaLayerWeights& w,
                            LlamaLayerActivations& a) const {
  Project(ctx, a.h_mlp, w.gate, w, LoraTarget::kGate, a.lora_dropout, a.gate);
  Project(ctx, a.h_mlp, w.up, w, LoraTarget::kUp, a.lora_dropout, a.up);
  ops::SwiGluForward(ctx, a.gate, a.up, a.act);
}

void LlamaLayer::Forward(const Context& ctx, const LlamaLayerWeights& w,
                         const LlamaTokenRegions& regions, LlamaAttentionKeys& keys,
                         LlamaLayerActivations& a, Tensor& proj, Tensor& x_out) const {
  const int64_t n = a.h_attn.dim(0);
  regions.NormForward(ctx, a.x, w.input_norm, a.h_attn, a.rstd_attn);
  AttentionForward(ctx, w, keys, a);
  Project(ctx, a.attn.View({n, -1}), w.o, w, LoraTarget::kO, a.lora_dropout, proj);
  ops::Add(ctx, a.x, regions.ReduceTokens(proj), a.x_mid);
  regions.NormForward(ctx, a.x_mid, w.post_norm, a.h_mlp, a.rstd_mlp);
  MlpForward(ctx, w, a);
  Project(ctx, a.act, w.down, w, LoraTarget::kDown, a.lora_dropout, proj);
  ops::Add(ctx, a.x_mid, regions.ReduceTokens(proj), x_out);
}

void LlamaLayer::Backward(const Context& ctx, const LlamaLayerWeights& w, LlamaLayerWeights& dw,
                          const LlamaTokenRegions& regions, LlamaAttentionKeys& keys,
                          const LlamaRecompute& recompute, LlamaLayerActivations& a,
                          LlamaScratch& s, Tensor& dx) const {
  const int64_t n = a.h_attn.dim(0);
  if (recompute.mlp) MlpForward(ctx, w, a);
  // MLP: x_out = x_mid + down(SwiGLU(gate(h), up(h))), h = RMSNorm(x_mid). dx holds d x_out.
  ProjectBackward(ctx, regions.FullTokenGradient(dx), a.act, w.down, w, dw, LoraTarget::kDown,
                  a.lora_dropout, s.dact, false, dw.down);
  ops::SwiGluBackward(ctx, s.dact, a.gate, a.up, s.dgate, s.dup);
  ProjectBackward(ctx, s.dgate, a.h_mlp, w.gate, w, dw, LoraTarget::kGate, a.lora_dropout, s.dh,
                  false, dw.gate);
  ProjectBackward(ctx, s.dup, a.h_mlp, w.up, w, dw, LoraTarget::kUp, a.lora_dropout, s.dh, true,
                  dw.up);
  regions.NormBackward(ctx, s.dh, a.x_mid, w.post_norm, a.rstd_mlp, dw.post_norm,
                       dx);  // dx now holds d x_mid
  // Attention: x_mid = x + o_proj(SsaAttention(q(h), k(h), v(h))), h = RMSNorm(x); the operator
  // applies RoPE and the temperatures.
  if (recompute.attention) AttentionForward(ctx, w, keys, a);
  Tensor dattn = s.dattn.View({n, -1});
  ProjectBackward(ctx, regions.FullTokenGradient(dx), a.attn.View({n, -1}), w.o, w, dw,
                  LoraTarget::kO, a.lora_dropout, dattn, false, dw.o);
  // The operator accumulates into its gradients.
  for (Tensor* t : {&s.du, &s.dk, &s.dv, &s.dquery_source, &s.dvalue_source}) {
    if (t->defined()) ops::Fill(ctx, *t, 0.0);
  }
  for (const LlamaAttentionCall& call : keys.Calls(a)) {  // the key-side gradients accumulate
    const ssa::SsaAttentionOutputs saved = CallOutputs(call, a);
    ssa::SsaAttentionGrads grads{Rows(s.du, call.query_begin, call.query_end),
                                 s.dk,
                                 s.dv,
                                 Rows(s.dquery_source, call.query_begin, call.query_end),
                                 s.dvalue_source,
                                 dw.ssa};
    ssa::SsaAttentionBackward(ctx, options_, call.shape,
                              Rows(s.dattn, call.query_begin, call.query_end), CallInputs(call, a),
                              w.ssa, saved, grads, call.core);
  }
  Tensor dk, dv, dvalue_source;
  keys.KeyGradients(ctx, s, dk, dv, dvalue_source);
  ProjectBackward(ctx, s.du.View({n, -1}), a.h_attn, w.q, w, dw, LoraTarget::kQ, a.lora_dropout,
                  s.dh, false, dw.q);
  ProjectBackward(ctx, dk.View({n, -1}), a.h_attn, w.k, w, dw, LoraTarget::kK, a.lora_dropout, s.dh,
                  true, dw.k);
  ProjectBackward(ctx, dv.View({n, -1}), a.h_attn, w.v, w, dw, LoraTarget::kV, a.lora_dropout, s.dh,
                  true, dw.v);
  if (s.dquery_source.defined()) {
    LinearBackward(ctx, s.dquery_source.View({n, -1}), a.h_attn, w.query_projection, s.dh, true,
                   dw.query_projection);
  }
  if (dvalue_source.defined()) {
    LinearBackward(ctx, dvalue_source.View({n, -1}), a.h_attn, w.value_projection, s.dh, true,
                   dw.value_projection);
  }
  regions.NormBackward(ctx, s.dh, a.x, w.input_norm, a.rstd_attn, dw.input_norm,
                       dx);  // dx now holds d x (the layer input)
}

}  // namespace kelvin::models
