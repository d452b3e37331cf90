// Context parallelism's token layout (Llama 3's all-gather variant with Megatron's load balance)
// and the sequence collectives around attention: a rank runs the token-local layers on its tokens
// alone; attention all-gathers the keys and values of the whole sequence, and their gradients
// (partial sums over each rank's queries) return to their owners by reduce-scatter. One type,
// ContextSplit, says which tokens of a micro-batch a rank holds: the model's tokens and positions,
// the loss's labels and the predictions gathered back all go through it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// B rows of T tokens split over a context-parallel group of CP ranks, seen from one of them.
// With CP > 1 every row is cut into 2 CP chunks of Tc = T / (2 CP) tokens, and rank r holds chunks
// r and 2 CP - 1 - r of every row (an early and a late chunk, so that each rank's queries see as
// many keys under the causal mask): two blocks. A group of one holds the whole rows: one block.
// Layouts (W values per token): a rank's tokens [block][B][block length] (each block's tokens
// contiguous: one attention query block); the full rows [B][T]; the collectives' [CP][rank's
// tokens]. With one rank all three are [B][T]: the split is the identity.
class ContextSplit {
 public:
  // Tokens [begin, begin + length) of every row, at tokens [local_begin, local_begin + B * length)
  // of the rank's layout.
  struct Block {
    int64_t begin = 0, length = 0, local_begin = 0;
  };

  // Checks that T splits into 2 CP chunks when CP > 1.
  ContextSplit(Communicator& group, int64_t rows, int64_t seq);

  int64_t rows() const { return rows_; }                          // B
  int64_t seq() const { return seq_; }                            // T
  int64_t local_tokens() const { return rows_ * seq_ / ranks_; }  // N = B*T / CP
  // This rank's blocks, in its layout's order.
  const std::vector<Block>& blocks() const { return blocks_; }

  // full [B, T, ...] of W values per token (any device) -> local [N * W] (flat, on any device)
  // this rank's tokens.
  void Local(const Context& ctx, const Tensor& full, Tensor& local) const;
  // The same into a new host tensor [N * W] (full on the host).
  Tensor Local(const Tensor& full) const;

  // local [N, ...] of every rank -> full [B*T, ...] (W values per token, on ctx's device).
  // scratch: [B*T*W] of local's dtype (the collective's layout).
  void Gather(const Context& ctx, const Tensor& local, Tensor& scratch, Tensor& full) const;
  // full [B*T, ...] partial sums of every rank -> local [N, ...] their sum over the ranks for this
  // rank's tokens. scratch as for Gather; full is left as it was.
  void ReduceScatter(const Context& ctx, const Tensor& full, Tensor& scratch, Tensor& local) const;

 private:
  // Copies rank `rank`'s tokens between the full rows and `part` (that rank's layout):
  // to_part: full -> part, else part -> full. Both flat, W values per token.
  void Move(const Context& ctx, int rank, const Tensor& from, Tensor& to, bool to_part) const;

  Communicator* group_;
  int rank_ = 0, ranks_ = 1;
  int64_t rows_ = 0, seq_ = 0;
  std::vector<Block> blocks_;  // this rank's
};

}  // namespace kelvin::parallel
