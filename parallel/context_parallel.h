// Context parallelism's token layout (Llama 3's all-gather variant with Megatron's load balance)
// and the sequence collectives around attention: a rank runs the token-local layers on its tokens
// alone; attention all-gathers the keys and values of the whole sequence, and their gradients
// (partial sums over each rank's queries) return to their owners by reduce-scatter.
#pragma once

#include "core/context.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// Every row of T tokens is cut into 2 CP chunks of Tc = T / (2 CP) tokens, and rank r holds chunks
// r and 2 CP - 1 - r of every row (an early and a late chunk, so that each rank's queries see as
// many keys under the causal mask). Layouts (W values per token): a rank's tokens [2 blocks][B][Tc]
// (block 0 its early chunk, block 1 its late one: each block's tokens contiguous, one attention
// query block); the full sequence [B][T]; the collectives' [CP][2][B][Tc].

// The chunk of every row that block `block` (0 or 1) of rank `rank` holds: its tokens are
// [chunk * Tc, (chunk + 1) * Tc).
inline int64_t ContextChunk(int rank, int block, int ranks) {
  return block == 0 ? rank : 2 * ranks - 1 - rank;
}

// full [B, T] (or [B*T]) host tensor -> this rank's tokens [2*B*Tc] (a new host tensor).
Tensor LocalSequence(const Tensor& full, int64_t batch, int cp_rank, int cp_size);

// local [2*B*Tc, ...] of every rank -> full [B*T, ...] (tensors of W values per token, on ctx's
// device). scratch: [B*T*W] of local's dtype (the collective's layout).
void GatherSequence(const Context& ctx, Communicator& cp, int64_t batch, const Tensor& local,
                    Tensor& scratch, Tensor& full);

// full [B*T, ...] partial sums of every rank -> local [2*B*Tc, ...] their sum over the ranks for
// this rank's tokens. scratch as for GatherSequence; full is left as it was.
void ReduceScatterSequence(const Context& ctx, Communicator& cp, int64_t batch, const Tensor& full,
                           Tensor& scratch, Tensor& local);

}  // namespace kelvin::parallel
