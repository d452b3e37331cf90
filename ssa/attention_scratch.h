// The scratch one backward call of the CUDA SSA operator allocates (ssa_attention.cu's
// cuda::SsaAttentionBackward and the cuDNN core it may run), reported by the operator's owner so
// that a memory plan adds it without restating the kernels' buffers.
#pragma once

#include "core/saturating_size.h"
#include "ssa/attention_backend.h"
#include "ssa/ssa_options.h"

namespace kelvin::ssa {

// One backward call: `queries` query tokens against `keys` keys, this rank's heads.
struct AttentionCallSize {
  SaturatingSize queries, keys, heads, kv_heads, head_dim;
};

// Bytes of the call's scratch: the bf16 q~, k~ (and v~ with the value temperature) the RoPE and
// temperature pass writes; the temperatures' f32 row terms; the core's gradients of q~, k~, v~
// (f32 and the row deltas from the own kernel; bf16 and the cuDNN frontend's accumulators from
// cuDNN; AUTO counts the larger). Without the cuBLASLt workspace and the cuDNN engine's own
// workspace (known only from a built plan).
SaturatingSize AttentionBackwardScratchBytes(const SsaOptions& options,
                                             const AttentionCallSize& call,
                                             AttentionBackend backend);

}  // namespace kelvin::ssa
