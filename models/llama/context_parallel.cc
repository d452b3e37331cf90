// Context parallelism's sequence layouts (see context_parallel.h).
#include "models/llama/context_parallel.h"

#include "core/check.h"
#include "core/copy.h"

namespace kelvin::models {
namespace {

// Copies between the full layout [B, CP, Tl, W] and the collective's [CP, B, Tl, W] (both flat):
// to_chunks: full -> chunks, else chunks -> full.
void Reorder(const Context& ctx, int64_t batch, int64_t ranks, const Tensor& from, Tensor& to,
             bool to_chunks) {
  const int64_t span = from.numel() / (batch * ranks);  // Tl * W
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t full_at = (b * ranks + r) * span, chunk_at = (r * batch + b) * span;
      const int64_t src = to_chunks ? full_at : chunk_at, dst = to_chunks ? chunk_at : full_at;
      Tensor out = to.Slice(dst, dst + span);
      CopyTensor(ctx, from.Slice(src, src + span), out);
    }
  }
}

}  // namespace

Tensor LocalSequence(const Tensor& full, int64_t batch, int cp_rank, int cp_size) {
  const Tensor flat = full.View({-1});
  KELVIN_CHECK(flat.numel() % (batch * cp_size) == 0)
      << "context parallelism: " << full.ToString() << " does not split into " << cp_size
      << " chunks per row of " << batch << " rows";
  const int64_t tl = flat.numel() / (batch * cp_size);
  Tensor local = Tensor::Empty({batch * tl}, full.dtype(), full.device());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t at = (b * cp_size + cp_rank) * tl;
    Tensor out = local.Slice(b * tl, (b + 1) * tl);
    CopyTensor(Context::Cpu(), flat.Slice(at, at + tl), out);
  }
  return local;
}

void GatherSequence(const Context& ctx, parallel::Communicator& cp, int64_t batch,
                    const Tensor& local, Tensor& scratch, Tensor& full) {
  Tensor out = full.View({-1});
  if (batch == 1) {
    cp.AllGather(local.View({-1}), out);
    return;
  }
  Tensor chunks = scratch.Slice(0, out.numel());
  cp.AllGather(local.View({-1}), chunks);
  Reorder(ctx, batch, cp.size(), chunks, out, false);
}

void ReduceScatterSequence(const Context& ctx, parallel::Communicator& cp, int64_t batch,
                           const Tensor& full, Tensor& scratch, Tensor& local) {
  Tensor out = local.View({-1});
  if (batch == 1) {
    cp.ReduceScatter(full.View({-1}), out, parallel::ReduceOp::kSum);
    return;
  }
  Tensor chunks = scratch.Slice(0, full.numel());
  Reorder(ctx, batch, cp.size(), full.View({-1}), chunks, true);
  cp.ReduceScatter(chunks, out, parallel::ReduceOp::kSum);
}

}  // namespace kelvin::models
