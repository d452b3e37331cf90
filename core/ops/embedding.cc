// Embedding: argument checks and dispatch to the CPU or CUDA kernel.
#include "core/ops/embedding.h"

#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

// ids [N] i32 and a vocab offset; returns N.
int64_t CheckIds(const Tensor& ids, int64_t vocab_begin) {
  KELVIN_CHECK_EQ(ids.ndim(), 1) << "embedding.ids must be [N], got " << ids.ToString();
  CheckDType(ids, DType::kI32, "embedding.ids");
  KELVIN_CHECK_GE(vocab_begin, 0) << "embedding.vocab_begin must be >= 0";
  return ids.dim(0);
}

}  // namespace

void EmbeddingForward(const Context& ctx, const Tensor& ids, const Tensor& table,
                      int64_t vocab_begin, Tensor& out) {
  const int64_t n = CheckIds(ids, vocab_begin);
  KELVIN_CHECK_EQ(table.ndim(), 2) << "embedding.table must be [V, D], got " << table.ToString();
  CheckShape(out, {n, table.dim(1)}, "embedding.out");
  CheckDType(out, table.dtype(), "embedding.out");
  CheckDevice(ctx, {&ids, &table, &out}, "EmbeddingForward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::EmbeddingForward(ctx, ids, table, vocab_begin, out);
#endif
  cpu::EmbeddingForward(ids, table, vocab_begin, out);
}

void EmbeddingBackward(const Context& ctx, const Tensor& ids, const Tensor& dout,
                       int64_t vocab_begin, Tensor& dtable) {
  if (!dtable.defined()) return;  // a frozen table
  const int64_t n = CheckIds(ids, vocab_begin);
  KELVIN_CHECK_EQ(dtable.ndim(), 2) << "embedding.dtable must be [V, D], got " << dtable.ToString();
  CheckShape(dout, {n, dtable.dim(1)}, "embedding.dout");
  CheckDType(dtable, AccumDType(dout.dtype()), "embedding.dtable");
  CheckDevice(ctx, {&ids, &dout, &dtable}, "EmbeddingBackward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::EmbeddingBackward(ctx, ids, dout, vocab_begin, dtable);
#endif
  cpu::EmbeddingBackward(ids, dout, vocab_begin, dtable);
}

}  // namespace kelvin::ops
