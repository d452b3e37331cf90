// Context parallelism's token split and sequence collectives (see context_parallel.h).
#include "parallel/context_parallel.h"

#include "core/check.h"
#include "core/copy.h"

namespace kelvin::parallel {
namespace {

// The blocks of rank `rank` of `ranks`: its early and late chunk of every row, or for a group of
// one the whole rows.
std::vector<ContextSplit::Block> BlocksOf(int rank, int ranks, int64_t rows, int64_t seq) {
  if (ranks == 1) return {{0, seq, 0}};
  const int64_t tc = seq / (2 * ranks);
  return {{rank * tc, tc, 0}, {(2 * ranks - 1 - rank) * tc, tc, rows * tc}};
}

}  // namespace

ContextSplit::ContextSplit(Communicator& group, int64_t rows, int64_t seq)
    : group_(&group), rank_(group.rank()), ranks_(group.size()), rows_(rows), seq_(seq) {
  KELVIN_CHECK(ranks_ == 1 || seq % (2 * ranks_) == 0)
      << "context parallelism: T=" << seq << " tokens per row do not split into 2 x " << ranks_
      << " chunks";
  blocks_ = BlocksOf(rank_, ranks_, rows_, seq_);
}

void ContextSplit::Move(const Context& ctx, int rank, const Tensor& from, Tensor& to,
                        bool to_part) const {
  const int64_t full_values = (to_part ? from : to).numel();
  KELVIN_CHECK(full_values % (rows_ * seq_) == 0 &&
               (to_part ? to : from).numel() * ranks_ == full_values)
      << "context parallelism: " << from.ToString() << " -> " << to.ToString()
      << " is not a split of " << rows_ << " rows of " << seq_ << " tokens over " << ranks_
      << " ranks";
  const int64_t width = full_values / (rows_ * seq_);  // W
  for (const Block& block : BlocksOf(rank, ranks_, rows_, seq_)) {
    // A block of whole rows is one stretch of both layouts.
    const int64_t rows_at_once = block.length == seq_ ? rows_ : 1;
    const int64_t span = rows_at_once * block.length * width;
    for (int64_t b = 0; b < rows_; b += rows_at_once) {
      const int64_t full_at = (b * seq_ + block.begin) * width;
      const int64_t part_at = (block.local_begin + b * block.length) * width;
      const int64_t src = to_part ? full_at : part_at, dst = to_part ? part_at : full_at;
      Tensor out = to.Slice(dst, dst + span);
      CopyTensor(ctx, from.Slice(src, src + span), out);
    }
  }
}

void ContextSplit::Local(const Context& ctx, const Tensor& full, Tensor& local) const {
  Tensor out = local.View({-1});
  Move(ctx, rank_, full.View({-1}), out, /*to_part=*/true);
}

Tensor ContextSplit::Local(const Tensor& full) const {
  KELVIN_CHECK(full.is_cpu()) << "context parallelism: " << full.ToString()
                              << " is not on the host";
  Tensor local = Tensor::Empty({full.numel() / ranks_}, full.dtype());
  Local(Context::Cpu(), full, local);
  return local;
}

void ContextSplit::Gather(const Context& ctx, const Tensor& local, Tensor& scratch,
                          Tensor& full) const {
  Tensor out = full.View({-1});
  Tensor collective = scratch.Slice(0, out.numel());
  group_->AllGather(local.View({-1}), collective);
  const int64_t part = out.numel() / ranks_;
  for (int r = 0; r < ranks_; ++r) {
    Move(ctx, r, collective.Slice(r * part, (r + 1) * part), out, /*to_part=*/false);
  }
}

void ContextSplit::ReduceScatter(const Context& ctx, const Tensor& full, Tensor& scratch,
                                 Tensor& local) const {
  Tensor out = local.View({-1});
  Tensor collective = scratch.Slice(0, full.numel());
  const int64_t part = full.numel() / ranks_;
  for (int r = 0; r < ranks_; ++r) {
    Tensor mine = collective.Slice(r * part, (r + 1) * part);
    Move(ctx, r, full.View({-1}), mine, /*to_part=*/true);
  }
  group_->ReduceScatter(collective, out, ReduceOp::kSum);
}

}  // namespace kelvin::parallel
