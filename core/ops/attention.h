// Causal grouped-query attention with document masking, unfused and scalar: the plain attention
// that the SSA operator (ssa/ssa_attention.h, which the model runs) generalises, kept as the
// "naive f32" baseline of bench/ssa_attention_bench.cc and as a second plain-attention check.
// CPU only (f32, f64); on a CUDA context it aborts saying to use the SSA operator.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// B rows of T tokens flattened to N = B*T, H query heads, G key/value heads (H divisible by G), d
// head dim. Token t of a row attends to s in [t - p_t, t], where p_t is its position id: ordinary
// causal attention when positions run 0..T-1, per-document attention when they restart (packing).
struct AttentionShape {
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
};

// q [N, H, d] (RoPE applied), k [N, G, d] (RoPE applied), v [N, G, d], positions [N] i32 ->
// out [N, H, d], lse [N, H] (AccumDType: log-sum-exp of each scaled score row, saved for backward).
// Scores are q.k / sqrt(d).
void AttentionForward(const Context& ctx, const AttentionShape& shape, const Tensor& q,
                      const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& out,
                      Tensor& lse);

// dout [N, H, d] with the forward's q, k, v, positions, out, lse -> dq [N, H, d], dk, dv [N, G, d]
// (all written). Probabilities are recomputed from lse (FlashAttention-2 style).
void AttentionBackward(const Context& ctx, const AttentionShape& shape, const Tensor& dout,
                       const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                       const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv);

namespace cpu {
void AttentionForward(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse);
void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& out,
                       const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace cpu

}  // namespace kelvin::ops
