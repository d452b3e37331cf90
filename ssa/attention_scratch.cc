// The CUDA backward's scratch by buffer, in the order ssa_attention.cu allocates it.
#include "ssa/attention_scratch.h"

namespace kelvin::ssa {

SaturatingSize AttentionBackwardScratchBytes(const SsaOptions& options,
                                             const AttentionCallSize& call,
                                             AttentionBackend backend) {
  using Size = SaturatingSize;
  const Size nq = call.queries, nk = call.keys, h = call.heads, g = call.kv_heads;
  const Size q = h * call.head_dim, kv = g * call.head_dim;
  // Prepare: bf16 q~ [nq, H, d], k~ [nk, G, d] and, with the value temperature, v~.
  const Size tiles = (nq * q + nk * kv + (options.value_temperature ? nk * kv : Size(0))) * 2;
  // The temperatures' f32 row terms: dz and d position [nq, H] of tau^q, dz [nk, G] of tau^v.
  const bool query_token = options.query_temperature && options.token_aware;
  const bool query_position = options.query_temperature && options.position_aware;
  const bool value_token = options.value_temperature && options.token_aware;
  const Size rows =
      (nq * h * ((query_token ? 1 : 0) + (query_position ? 1 : 0)) + (value_token ? nk * g : 0)) *
      4;
  // The own kernel: f32 dq~ [nq, H, d], dk~, dv~ [nk, G, d] and delta [nq, H].
  const Size fused = (nq * q + nk * kv * 2 + nq * h) * 4;
  // The cuDNN core: bf16 dq~, dk~, dv~, and the frontend's workspace for its ragged backward
  // bounded by the token counts: an f32 dQ accumulator [nq, H, d] and row sums [nq, H], and with
  // GQA f32 full-head dK and dV [nk, H, d].
  const Size cudnn = (nq * q + nk * kv * 2) * 2 + (nq * q + nq * h) * 4 +
                     (h.value() > g.value() ? nk * q * 2 * 4 : Size(0));
  Size core = fused;
  if (backend == AttentionBackend::kCudnn) core = cudnn;
  if (backend == AttentionBackend::kAuto && cudnn.value() > fused.value()) core = cudnn;
  return tiles + rows + core;
}

}  // namespace kelvin::ssa
