// The naive plain attention of bench/ssa_attention_bench.cc's "naive f32" baseline: causal
// grouped-query attention with document masking, unfused and scalar (OpenMP over rows, one query at
// a time, no GEMM). The model never calls it: it runs the SSA operator of ssa/, which covers
// attention without temperatures. CPU only (f32, f64).
#pragma once

#include "core/ops/reference/attention.h"
#include "core/tensor.h"

namespace kelvin::bench {

using reference::AttentionShape;

// q [N, H, d] (RoPE applied), k [N, G, d] (RoPE applied), v [N, G, d], positions [N] i32 ->
// out [N, H, d], lse [N, H] (the log-sum-exp of each scaled score row, saved for backward).
// Scores are q.k / sqrt(d). Arguments are checked (an abort names the tensor).
void NaiveAttentionForward(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse);

// dout [N, H, d] with the forward's q, k, v, positions, out, lse -> dq [N, H, d], dk, dv [N, G, d]
// (all written). Probabilities are recomputed from lse (FlashAttention-2 style).
void NaiveAttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& positions,
                            const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk,
                            Tensor& dv);

}  // namespace kelvin::bench
