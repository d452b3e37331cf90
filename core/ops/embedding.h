// Token embedding lookup and its backward (scatter-add into the table gradient), with
// Megatron-style vocab-parallel shards: a rank holds table rows [vocab_begin, vocab_begin + V) and
// rows of tokens outside its shard are zero. N tokens, V vocabulary rows held here, D hidden.
// CPU: f32, f64 tables. CUDA: f32, bf16 tables.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// ids [N] i32 (token ids), table [V, D] (this rank's rows [vocab_begin, vocab_begin + V)) ->
// out [N, D] (table's dtype): out[t] = table[ids[t] - vocab_begin], or zero when ids[t] is outside
// the shard (a whole table has vocab_begin = 0). Ids are validated by the data loader, not here.
void EmbeddingForward(const Context& ctx, const Tensor& ids, const Tensor& table,
                      int64_t vocab_begin, Tensor& out);

// ids [N] i32, dout [N, D] (table's dtype) -> dtable [V, D] (AccumDType of dout: f32 for f32 and
// bf16, f64 for f64) accumulated +=: dtable[ids[t] - vocab_begin] += dout[t]; ids outside the
// shard are skipped. CPU: deterministic for any thread count (each thread owns a block of columns
// and adds tokens in order). CUDA: f32 atomicAdd, so the summation order of repeated ids varies
// between runs (results agree to f32 rounding, not bit for bit).
// An undefined dtable (a frozen table's gradient) skips the call.
void EmbeddingBackward(const Context& ctx, const Tensor& ids, const Tensor& dout,
                       int64_t vocab_begin, Tensor& dtable);

namespace internal {
// The table row of token id `id` in a shard of rows [vocab_begin, vocab_begin + V), or -1 when the
// id is outside the shard (shared by the CPU and CUDA kernels).
KELVIN_HOST_DEVICE inline int64_t ShardRow(int32_t id, int64_t vocab_begin, int64_t v) {
  const int64_t row = static_cast<int64_t>(id) - vocab_begin;
  return row >= 0 && row < v ? row : -1;
}
}  // namespace internal

// Backends behind the dispatchers above (arguments already checked).
namespace cpu {
void EmbeddingForward(const Tensor& ids, const Tensor& table, int64_t vocab_begin, Tensor& out);
void EmbeddingBackward(const Tensor& ids, const Tensor& dout, int64_t vocab_begin, Tensor& dtable);
}  // namespace cpu
namespace cuda {
void EmbeddingForward(const Context& ctx, const Tensor& ids, const Tensor& table,
                      int64_t vocab_begin, Tensor& out);
void EmbeddingBackward(const Context& ctx, const Tensor& ids, const Tensor& dout,
                       int64_t vocab_begin, Tensor& dtable);
}  // namespace cuda

}  // namespace kelvin::ops
