// LlamaModel: Llama-3 with explicit forward and backward over one micro-batch, its attention the
// SSA operator (ssa/ssa_attention.h; vanilla attention when the config has no SSA). Parameters
// carry Hugging Face's names ("model.layers.0.self_attn.q_proj.weight", ...) so checkpoints map
// 1:1; the SSA parameters are named by SsaLayerParameters (llama_config.h).
// B rows of T tokens flattened to N = B*T; D hidden, H/G query/kv heads, d head dim, F ffn, V
// vocab. Parameter gradients accumulate (+=) across micro-batches until ParameterSet::ZeroGrads.
#pragma once

#include <string>
#include <vector>

#include "core/context.h"
#include "core/io/hf_checkpoint.h"
#include "core/optim/parameter_set.h"
#include "core/tensor.h"
#include "models/llama/llama_config.h"
#include "ssa/ssa_attention_args.h"
#include "ssa/temperature.h"

namespace kelvin::models {

// What one decoder layer keeps from forward for backward.
struct LlamaLayerActivations {
  Tensor x;          // [N, D] layer input (residual stream)
  Tensor h_attn;     // [N, D] RMSNorm(x)
  Tensor rstd_attn;  // [N]
  Tensor u, k, v;    // [N, H, d], [N, G, d], [N, G, d] before RoPE (the operator applies it)
  Tensor attn;       // [N, H, d] attention output
  Tensor lse;        // [N, H] attention log-sum-exp
  Tensor tau_q;      // [N, H] SSA query temperature (undefined when off)
  Tensor tau_v;      // [N, G] SSA value temperature (undefined when off)
  // Without weight sharing: W_tmp x, what the temperatures read (undefined otherwise).
  Tensor query_source;  // [N, H, d]
  Tensor value_source;  // [N, G, d]
  Tensor x_mid;      // [N, D] x + attention projection
  Tensor h_mlp;      // [N, D] RMSNorm(x_mid)
  Tensor rstd_mlp;   // [N]
  Tensor gate, up;   // [N, F]
  Tensor act;        // [N, F] SiLU(gate) * up
};

class LlamaModel {
 public:
  // Declares and allocates the parameters (zero) in `dtype` (f32 or f64 on the CPU).
  LlamaModel(const LlamaConfig& config, DType dtype);

  const LlamaConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  ParameterSet& parameters() { return params_; }

  // Copies every parameter from a Hugging Face checkpoint (converting dtypes); a missing tensor
  // or a shape mismatch is an error naming the tensor and the checkpoint.
  absl::Status LoadHfCheckpoint(const io::HfCheckpoint& checkpoint);
  // Writes config.json and the safetensors weights (f32) that transformers loads.
  absl::Status ExportHf(const std::string& directory) const;
  // Deterministic random initialisation (normal(0, 0.02) matrices, unit norms, SSA as
  // InitSsaParameters) from `seed`.
  void InitRandom(uint64_t seed);
  // SSA's fine-tuning start (SSA.md section 3): read-outs 0, alpha = alpha_init, and each W_tmp
  // (weight_sharing off) a copy of the W_q / W_v rows of its head (choice: the temperatures then
  // start by reading what the weight-shared variant reads). LoadHfCheckpoint calls it for a
  // checkpoint without SSA tensors (a pretrained Llama).
  void InitSsaParameters();

  // tokens, positions [B, T] i32 -> logits [B*T, V] (a buffer of the model's, valid until the
  // next Forward; the loss may overwrite it in place with dlogits for Backward).
  Tensor& Forward(const Context& ctx, const Tensor& tokens, const Tensor& positions);
  // dlogits [B*T, V] (usually the logits buffer itself) -> parameter gradients (+=).
  void Backward(const Context& ctx, const Tensor& dlogits);

  // Bytes of the buffers allocated for the current micro-batch shape, by the memory plan's
  // categories (what PlanLlamaMemory predicts): activations, logits, backward scratch.
  struct BufferBytes {
    int64_t activations = 0, logits = 0, backward_scratch = 0;
  };
  BufferBytes AllocatedBufferBytes() const;

  // Per layer, the temperatures of the last Forward (SSA.md section 7); empty without SSA.
  std::vector<ssa::TemperatureStatistics> TemperatureStatistics() const;

  // HF names of the parameters of layer `layer` (for tests and sharding).
  static std::string LayerParam(int64_t layer, std::string_view suffix);

 private:
  void AllocateActivations(int64_t batch, int64_t seq);
  void LayerForward(const Context& ctx, int64_t layer, const Tensor& x_in, Tensor& x_out);
  // dx [N, D]: gradient w.r.t. the layer output on entry, w.r.t. its input on return.
  void LayerBackward(const Context& ctx, int64_t layer, Tensor& dx);
  // The SSA operator's view of layer `layer`: inputs over its activations, its parameters, and
  // their gradients over the backward scratch / parameter gradients.
  ssa::SsaAttentionInputs AttentionInputs(int64_t layer) const;
  ssa::SsaParameters AttentionParameters(int64_t layer, bool gradients);
  const Tensor& LmHead();
  Tensor& LmHeadGrad();

  LlamaConfig config_;
  ssa::SsaOptions attention_options_;  // config_.AttentionOptions()
  DType dtype_;
  ParameterSet params_;
  Tensor inv_freq_;  // [d/2] RoPE inverse frequencies (AccumDType)

  // Buffers sized for the current micro-batch shape (reallocated when it changes).
  int64_t batch_ = 0, seq_ = 0;
  Tensor tokens_, positions_;                  // [N] i32 copies of the inputs
  std::vector<LlamaLayerActivations> layers_;  // [L]
  Tensor x_final_, h_final_, rstd_final_;      // [N, D], [N, D], [N]
  Tensor logits_;                              // [N, V]
  // Backward scratch.
  Tensor dx_, dh_, d_proj_;    // [N, D]
  Tensor du_, dattn_;          // [N, H, d]
  Tensor dk_, dv_;             // [N, G, d]
  Tensor dquery_source_;       // [N, H, d] without weight sharing (else undefined)
  Tensor dvalue_source_;       // [N, G, d] without weight sharing (else undefined)
  Tensor dgate_, dup_, dact_;  // [N, F]
};

}  // namespace kelvin::models
