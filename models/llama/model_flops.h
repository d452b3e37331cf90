// Training FLOPs of Llama: the Megatron / PaLM "model FLOPs" count, which MFU divides by the
// hardware peak, and the hardware FLOPs the kernels execute (recompute included), which the
// step-time model of `kelvin plan` divides by the attained rates.
#pragma once

#include <cstdint>

#include "models/llama/llama_config.h"

namespace kelvin::models {

// Per token of a T-token row, forward + backward:
//   6 * P_gemm  +  6 * L * T * H * d
// P_gemm: the parameters inside GEMMs (every decoder matrix and the LM head; not the embedding
// table, a lookup; not the norms). 6 L T H d: the attention scores and their weighted sum over
// the H query heads of width d, causal (half of 12 L T H d; H d = D for Llama-3). The count ignores
// recomputation (model, not hardware, FLOPs), document masking (rows are counted as if fully
// causal, as Megatron reports them) and SSA's temperature heads (so SSA's MFU compares with
// vanilla's).
double TrainingFlopsPerToken(const LlamaConfig& config, int64_t sequence_length);

struct PassFlops {
  double forward = 0;
  double backward = 0;  // with the forward work recompute repeats
  double Total() const { return forward + backward; }
};

// The hardware FLOPs of one decoder layer per token of a T-token row:
//   GEMMs: forward 2 x the layer's matrix parameters, backward 4 x (2 x on a frozen base, which
//     computes no weight gradient; the LoRA adapters' small GEMMs are not counted), plus 2 x the
//     matrices that recompute runs again (W_q, W_k, W_v with recompute_attention; gate and up with
//     recompute_mlp);
//   attention core, in FlashAttention's count (the unit of Kelvin's measured attention rates):
//     forward 2 T H d (causal), backward 5 T H d (it recomputes the scores), plus the forward
//     again with recompute_attention.
// Like TrainingFlopsPerToken it leaves out SSA's temperature heads and the elementwise passes.
struct LayerFlops {
  PassFlops gemm;
  PassFlops attention;
};
LayerFlops DecoderLayerFlopsPerToken(const LlamaConfig& config, int64_t sequence_length,
                                     bool recompute_attention, bool recompute_mlp);

// The LM head's GEMM per token: forward 2 V D, backward 4 V D (2 V D when frozen).
PassFlops LmHeadFlopsPerToken(const LlamaConfig& config);

}  // namespace kelvin::models
