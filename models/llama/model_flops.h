// Model FLOPs of Llama training: the Megatron / PaLM "model FLOPs" count, which MFU divides by the
// hardware peak.
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

}  // namespace kelvin::models
