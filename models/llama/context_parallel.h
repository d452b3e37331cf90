// Context parallelism's token layout (Llama 3's all-gather variant): each rank of the CP group
// holds Tl = T / CP consecutive tokens of every row, [rank * Tl, (rank + 1) * Tl), and runs the
// token-local layers on them alone; attention all-gathers the keys and values of the whole
// sequence, and their gradients (partial sums over each rank's queries) return to their owners by
// reduce-scatter. These helpers move [B, T, W] sequences between the two layouts: a row's tokens
// are contiguous in the full layout, and a rank's chunks of every row in the collective's.
#pragma once

#include "core/context.h"
#include "core/tensor.h"
#include "parallel/communicator.h"

namespace kelvin::models {

// full [B, T] (or [B*T]) host tensor -> this rank's tokens [B*Tl] (a new host tensor).
Tensor LocalSequence(const Tensor& full, int64_t batch, int cp_rank, int cp_size);

// local [B*Tl, ...] of every rank -> full [B*T, ...] (each a tensor of W values per token, on
// ctx's device). scratch: [CP * B * Tl * W] of local's dtype, the collective's layout (unused
// when B == 1, where the layouts agree).
void GatherSequence(const Context& ctx, parallel::Communicator& cp, int64_t batch,
                    const Tensor& local, Tensor& scratch, Tensor& full);

// full [B*T, ...] partial sums of every rank -> local [B*Tl, ...] their sum over the ranks for
// this rank's tokens. scratch as for GatherSequence; full is left as it was.
void ReduceScatterSequence(const Context& ctx, parallel::Communicator& cp, int64_t batch,
                           const Tensor& full, Tensor& scratch, Tensor& local);

}  // namespace kelvin::models
