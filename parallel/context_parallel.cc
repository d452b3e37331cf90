// Context parallelism's sequence layouts (see context_parallel.h).
#include "parallel/context_parallel.h"

#include "core/check.h"
#include "core/copy.h"

namespace kelvin::parallel {
namespace {

// Copies between the full layout [B][2 CP][Tc*W] and the collective's [CP][2][B][Tc*W] (both
// flat): to_collective: full -> collective, else collective -> full.
void Reorder(const Context& ctx, int64_t batch, int ranks, const Tensor& from, Tensor& to,
             bool to_collective) {
  const int64_t span = from.numel() / (batch * 2 * ranks);  // Tc * W
  for (int r = 0; r < ranks; ++r) {
    for (int block = 0; block < 2; ++block) {
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t full_at = (b * 2 * ranks + ContextChunk(r, block, ranks)) * span;
        const int64_t collective_at = ((r * 2 + block) * batch + b) * span;
        const int64_t src = to_collective ? full_at : collective_at;
        const int64_t dst = to_collective ? collective_at : full_at;
        Tensor out = to.Slice(dst, dst + span);
        CopyTensor(ctx, from.Slice(src, src + span), out);
      }
    }
  }
}

}  // namespace

Tensor LocalSequence(const Tensor& full, int64_t batch, int cp_rank, int cp_size) {
  const Tensor flat = full.View({-1});
  KELVIN_CHECK(flat.numel() % (batch * 2 * cp_size) == 0)
      << "context parallelism: " << full.ToString() << " does not split into 2 x " << cp_size
      << " chunks per row of " << batch << " rows";
  const int64_t tc = flat.numel() / (batch * 2 * cp_size);
  Tensor local = Tensor::Empty({2 * batch * tc}, full.dtype(), full.device());
  for (int block = 0; block < 2; ++block) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = (b * 2 * cp_size + ContextChunk(cp_rank, block, cp_size)) * tc;
      const int64_t to = (block * batch + b) * tc;
      Tensor out = local.Slice(to, to + tc);
      CopyTensor(Context::Cpu(), flat.Slice(at, at + tc), out);
    }
  }
  return local;
}

void GatherSequence(const Context& ctx, Communicator& cp, int64_t batch, const Tensor& local,
                    Tensor& scratch, Tensor& full) {
  Tensor out = full.View({-1});
  Tensor collective = scratch.Slice(0, out.numel());
  cp.AllGather(local.View({-1}), collective);
  Reorder(ctx, batch, cp.size(), collective, out, false);
}

void ReduceScatterSequence(const Context& ctx, Communicator& cp, int64_t batch, const Tensor& full,
                           Tensor& scratch, Tensor& local) {
  Tensor out = local.View({-1});
  Tensor collective = scratch.Slice(0, full.numel());
  Reorder(ctx, batch, cp.size(), full.View({-1}), collective, true);
  cp.ReduceScatter(collective, out, parallel::ReduceOp::kSum);
}

}  // namespace kelvin::parallel
