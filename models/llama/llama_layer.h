// LlamaLayer: one Llama decoder layer's forward and explicit backward over its typed weights and
// activation buffers, the one layer both the training model (LlamaModel) and the KV-cache decoder
// (LlamaDecoder) run. What differs between them is explicit and small: how the norm and
// row-parallel regions treat the tokens (LlamaTokenRegions), and where the new keys and values go
// and which attention calls read them (LlamaAttentionKeys).
#pragma once

#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "models/llama/llama_activations.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_layer_weights.h"
#include "parallel/comm/communicator.h"
#include "ssa/ssa_attention.h"
#include "ssa/ssa_attention_args.h"

namespace kelvin::models {

// y [N, out] = x [N, in] W^T, W [out, in] as Hugging Face stores Linear weights.
void Linear(const Context& ctx, const Tensor& x, const Tensor& w, Tensor& y);
// For y = x W^T: dx (= or +=) dy W, dW += dy^T x.
void LinearBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                    Tensor& dx, bool accumulate_dx, Tensor& dw);

// The tensor-parallel regions of the residual stream: N tokens in the GEMM regions, Nl in the norm
// and residual regions (N / TP with sequence parallelism, else N). Without sequence parallelism
// (and always in the decoder) a row-parallel GEMM's partial sums are all-reduced in place; with it
// they are reduce-scattered along the tokens and each norm's output is all-gathered.
class LlamaTokenRegions {
 public:
  // `scratch` (its local_tokens, gathered_grad and d_proj) must outlive the regions' calls; the
  // forward reads it only with sequence parallelism, the backward always (d_proj).
  LlamaTokenRegions(parallel::Communicator& tp, bool sequence_parallel, double rms_norm_eps,
                    LlamaScratch* scratch)
      : tp_(&tp), sequence_parallel_(sequence_parallel), eps_(rms_norm_eps), scratch_(scratch) {}

  // RMSNorm of the local tokens x [Nl, D] -> h [N, D], rstd [Nl].
  void NormForward(const Context& ctx, const Tensor& x, const Tensor& weight, Tensor& h,
                   Tensor& rstd) const;
  // dh [N, D] of the norm's output (the TP ranks' partial sums, reduced here) -> dx [Nl, D] +=
  // the input gradient, dweight += the weight gradient.
  void NormBackward(const Context& ctx, Tensor& dh, const Tensor& x, const Tensor& weight,
                    const Tensor& rstd, Tensor& dweight, Tensor& dx) const;
  // The partial sums [N, D] of the TP ranks' row-parallel GEMMs -> summed: `partial` itself (in
  // place) or, with sequence parallelism, the local [Nl, D] in scratch.
  Tensor& ReduceTokens(Tensor& partial) const;
  // The full-token gradient [N, D] of a region's output from the local [Nl, D] one: `local`
  // itself, or with sequence parallelism all-gathered into scratch.
  const Tensor& FullTokenGradient(const Tensor& local) const;

 private:
  parallel::Communicator* tp_;
  bool sequence_parallel_;
  double eps_;
  LlamaScratch* scratch_;
};

// One call of the SSA operator in a layer: a block of query rows, [query_begin, query_end) of the
// layer's query-side buffers (u, query_source, attn, lse, tau^q and their gradients), against the
// key range `inputs` holds.
struct LlamaAttentionCall {
  ssa::SsaBlockShape shape;
  int64_t query_begin = 0, query_end = 0;
  // The call's query positions and key side (k, v, key positions, value source, RoPE); the layer
  // fills the query rows u and query_source from its buffers.
  ssa::SsaAttentionInputs inputs;
  Tensor value_temperature;  // [Nk, G] tau^v the call writes (undefined: none, or keys prepared)
  ssa::AttentionCoreOptions core;
};

// Where a layer's new keys and values go and which attention calls read them: the training model's
// activation buffers (gathered over context parallelism; one call, or two with it) or the
// decoder's cache (each sequence's new rows rotated and scaled once; one call per sequence).
class LlamaAttentionKeys {
 public:
  virtual ~LlamaAttentionKeys() = default;
  // After the projections wrote a.u, a.k, a.v (and the temperature sources): makes the keys and
  // values the calls read (a collective or a write into a cache; forward only, once per forward).
  virtual void PlaceKeys(const Context& ctx, const LlamaLayerWeights& w,
                         LlamaLayerActivations& a) = 0;
  // The layer's attention calls over a's buffers (no side effect: the backward asks again).
  virtual std::vector<LlamaAttentionCall> Calls(const LlamaLayerActivations& a) const = 0;
  // The backward's key-side gradients (`scratch` dk, dv, dvalue_source of the keys the calls saw)
  // -> those of this rank's own tokens [N, G, d] (context parallelism reduce-scatters them).
  virtual void KeyGradients(const Context& ctx, LlamaScratch& scratch, Tensor& dk, Tensor& dv,
                            Tensor& dvalue_source);
};

// The layer's math: N tokens (Nl of them in the norm regions; llama_activations.h).
class LlamaLayer {
 public:
  explicit LlamaLayer(const LlamaConfig& config)
      : options_(config.AttentionOptions()),
        lora_scale_(config.lora.has_value() ? config.lora->Scale() : 0.0) {}

  const ssa::SsaOptions& attention_options() const { return options_; }

  // a.x [Nl, D] -> x_out [Nl, D] (x_out may be a.x: the residual adds run in place), every
  // forward activation into a's buffers (a.x_mid may be a.x, a.h_mlp a.h_attn). `proj` [N, D]:
  // scratch for the row-parallel GEMMs' partial sums.
  void Forward(const Context& ctx, const LlamaLayerWeights& w, const LlamaTokenRegions& regions,
               LlamaAttentionKeys& keys, LlamaLayerActivations& a, Tensor& proj,
               Tensor& x_out) const;
  // From a.h_attn: the q, k, v (and temperature source) projections, the keys placed, and the
  // SSA operator's outputs (attn, lse, tau^q, tau^v). Forward, and backward's recompute.
  void AttentionForward(const Context& ctx, const LlamaLayerWeights& w, LlamaAttentionKeys& keys,
                        LlamaLayerActivations& a) const;
  // From a.h_mlp: gate, up and act = SwiGLU(gate, up).
  void MlpForward(const Context& ctx, const LlamaLayerWeights& w, LlamaLayerActivations& a) const;
  // dx [Nl, D]: the gradient of the layer's output on entry, of its input on return; dw += the
  // parameter gradients. a holds the forward's kept activations; those `recompute` dropped are
  // recomputed into a's buffers first (the same deterministic forward: the same bits).
  void Backward(const Context& ctx, const LlamaLayerWeights& w, LlamaLayerWeights& dw,
                const LlamaTokenRegions& regions, LlamaAttentionKeys& keys,
                const LlamaRecompute& recompute, LlamaLayerActivations& a, LlamaScratch& s,
                Tensor& dx) const;

 private:
  // y [N, out] = x [N, in] W^T, plus LoRA's s (x' A^T) B^T where w.lora adapts projection
  // `target` (x' = x, or with `dropout` set x with its mask: LoraInput). A row-parallel
  // projection's y is a partial sum over the TP ranks (x and A this rank's slice of the input, B
  // whole), reduced with the projection's: its B gradient is partial too.
  void Project(const Context& ctx, const Tensor& x, const Tensor& weight,
               const LlamaLayerWeights& w, LoraTarget target, const LlamaLoraDropout& dropout,
               Tensor& y) const;
  // Its backward: dx (= or += with accumulate_dx) dy W + the adapter's (through the same mask);
  // dweight, and the adapter's da and db in dw.lora, += (each skipped where undefined: frozen).
  // The adapter's x' and z = x' A^T are recomputed ([N, in] and [N, r]: cheaper to redo than to
  // keep per layer).
  void ProjectBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                       const LlamaLayerWeights& w, LlamaLayerWeights& dw, LoraTarget target,
                       const LlamaLoraDropout& dropout, Tensor& dx, bool accumulate_dx,
                       Tensor& dweight) const;

  ssa::SsaOptions options_;
  double lora_scale_;  // s of model.lora (0 without)
};

}  // namespace kelvin::models
