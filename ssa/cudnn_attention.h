// The cuDNN attention core (docs/design.md, "Attention on a GPU"): cuDNN's fused flash attention
// through the cuDNN frontend's SDPA graphs, forward (O and the natural-log log-sum-exp) and
// backward (dq~, dk~, dv~), on the bf16 q~, k~, v~ that the SSA operator's RoPE/temperature pass
// writes, in cuDNN's ragged (THD) layout over the call's AttentionSegments. H query heads, G kv
// heads, d head dim; Nq / Nk query / key tokens. Built only with KELVIN_CUDNN.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/bf16.h"
#include "core/context.h"
#include "ssa/attention_segments.h"

namespace kelvin::ssa::cudnn_core {

// Empty when the core can run on ctx's device: libcudnn.so.9 opens (it is loaded at first use,
// not linked), it is cuDNN 9.6 or newer (the backward's workspace bounded by the token counts)
// and the device is Hopper or newer; else why not.
std::string UnavailableReason(const Context& ctx);

// One call's operands, in the SSA operator's token-major layout.
struct Tiles {
  const bf16* q = nullptr;  // [Nq, H, d] q~
  const bf16* k = nullptr;  // [Nk, G, d] k~
  const bf16* v = nullptr;  // [Nk, G, d] v~
  int64_t query_tokens = 0, key_tokens = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// out [Nq, H, d] and lse [Nq, H] of every query (each segment's queries against its keys, causal
// aligned to the segment's last key). Unimplemented, with cuDNN's reason, when it builds no plan
// for the shape (the caller runs the own kernel then); a plan that fails to run aborts.
absl::Status Forward(const Context& ctx, const AttentionSegments& segments, const Tiles& tiles,
                     bf16* out, float* lse);

// dq [Nq, H, d], dk and dv [Nk, G, d] (bf16, written) from dout [Nq, H, d] and the forward's out
// and lse (merged over key blocks when the keys were split). Keys outside every segment are not
// written: the caller zeroes them. Unimplemented as Forward.
absl::Status Backward(const Context& ctx, const AttentionSegments& segments, const Tiles& tiles,
                      const bf16* out, const float* lse, const bf16* dout, bf16* dq, bf16* dk,
                      bf16* dv);

}  // namespace kelvin::ssa::cudnn_core
