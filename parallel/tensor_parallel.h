// Megatron's tensor-parallel region ops over the TP group: the collectives around the column- and
// row-parallel GEMMs, with and without sequence parallelism.
// N tokens, Nl = N / TP of them this rank's under sequence parallelism; W values per token.
#pragma once

#include "core/context.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// Row-parallel outputs: partial [N, W] of every rank -> their sum, in place (Megatron's
// reduce_from_tensor_model_parallel_region).
void ReduceFromTensorParallelRegion(Communicator& tp, Tensor& partial);

// The same under sequence parallelism: partial [N, W] of every rank -> local [Nl, W], the sum at
// this rank's tokens (reduce_scatter_to_sequence_parallel_region).
void ReduceScatterToSequenceParallelRegion(Communicator& tp, const Tensor& partial, Tensor& local);

// local [Nl, W] of every rank -> full [N, W], the ranks' tokens in rank order
// (gather_from_sequence_parallel_region).
void GatherFromSequenceParallelRegion(Communicator& tp, const Tensor& local, Tensor& full);

// Column-parallel outputs: local [R, W/TP] of every rank (on ctx's device) -> [R, W] on ctx's
// device, each row's slices side by side in rank order (gather_from_tensor_model_parallel_region,
// as the decoder gathers its vocab-parallel logits). A group of one returns `local` itself.
Tensor GatherFromTensorParallelRegion(const Context& ctx, Communicator& tp, const Tensor& local);

}  // namespace kelvin::parallel
