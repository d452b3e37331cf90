// The arguments of the SSA attention operator (docs/ssa.md "Kernel contract"), shared by its naive
// reference (ssa/reference/), the tiled CPU kernel and the CUDA kernel. B rows; H query heads, G
// key/value heads (H divisible by G), d head dim. Token indices and position ids are always
// global: query i (index within its row) sees key j iff i - p_i <= j <= i.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kelvin::ssa {

// The token ranges of one call, the same in every row: the whole rows for the full operator, a
// local query chunk against all keys (context parallelism), or one key block (a ring's step).
// Query-side tensors hold Nq = B*Tq tokens (row by row), key-side tensors Nk = B*Tk tokens.
struct SsaBlockShape {
  int64_t batch = 0;        // B
  int64_t query_begin = 0;  // global index, within its row, of each row's first query token
  int64_t query_count = 0;  // Tq
  int64_t key_begin = 0;    // global index of each row's first key token
  int64_t key_count = 0;    // Tk

  // Queries and keys both the whole rows of T tokens.
  static SsaBlockShape Full(int64_t batch, int64_t seq) { return {batch, 0, seq, 0, seq}; }
};

struct SsaAttentionInputs {
  // Query side (Nq tokens).
  Tensor u;                // [Nq, H, d] queries before RoPE
  Tensor query_positions;  // [Nq] i32 position ids: RoPE angles, n = p + 1, and the mask
  Tensor query_source;     // [Nq, H, d] temperature source; weight sharing: undefined (u is it)
  // Key side (Nk tokens).
  Tensor k;              // [Nk, G, d] keys before RoPE
  Tensor v;              // [Nk, G, d]
  Tensor key_positions;  // [Nk] i32; undefined when the keys are the query tokens themselves
  Tensor value_source;   // [Nk, G, d] temperature source; weight sharing: undefined (v is it)
  Tensor inv_freq;       // [d/2] RoPE inverse frequencies (ops::RopeInverseFrequencies)
  // Multiplies RoPE's cos and sin, so q~ and k~ (ops::RopeAttentionFactor: yarn's and longrope's;
  // 1 otherwise). With SSA, q~ = tau^q (attention_factor R(u)).
  double rope_attention_factor = 1.0;
  // Forward only: k holds k~ = RoPE(k) and v holds v~ = tau^v v already (PrepareKeysAndValues,
  // run once per token as a decoder appends it to its cache), so the operator neither rotates the
  // keys nor computes or applies tau^v: value_source, value_readout and outputs.value_temperature
  // are not read (value_source must be undefined). key_positions still carry the keys' positions.
  bool keys_prepared = false;
};

// The per-layer SSA parameters (and, in SsaAttentionGrads, their gradients).
struct SsaParameters {
  Tensor query_readout;  // a^q [H, d]
  Tensor value_readout;  // a^v [G, d]
  Tensor alpha;          // [H]
};

struct SsaAttentionOutputs {
  // [Nq, H, d]: sum over the call's visible keys of softmax-over-those-keys * v~. For the full
  // operator this is O; for a key block it is the block-local partial output (0 where a query
  // sees no key of the block); blocks combine by their lse (the log-sum-exp merge the tests run).
  Tensor out;
  Tensor lse;                // [Nq, H] log-sum-exp of the scaled scores; -inf where none visible
  Tensor query_temperature;  // [Nq, H] tau^q (saved for backward)
  Tensor value_temperature;  // [Nk, G] tau^v (saved for backward)
};

struct SsaAttentionGrads {
  Tensor du;             // [Nq, H, d]
  Tensor dk, dv;         // [Nk, G, d]
  Tensor dquery_source;  // [Nq, H, d] without weight sharing; undefined with it (goes into du)
  Tensor dvalue_source;  // [Nk, G, d] without weight sharing; undefined with it (goes into dv)
  SsaParameters params;  // d a^q [H, d], d a^v [G, d], d alpha [H]: always accumulated (+=)
};

}  // namespace kelvin::ssa
