// Naive embedding: out[t] = table[ids[t] - vocab_begin] (zero outside the shard) and the
// scatter-add dtable[ids[t] - vocab_begin] += dout[t], in f64. N tokens, V rows, D hidden.
#include "core/ops/reference/embedding.h"

#include "core/ops/reference/values.h"

namespace kelvin::reference {

void EmbeddingForward(const Tensor& ids, const Tensor& table, int64_t vocab_begin, Tensor& out) {
  const int64_t n = ids.dim(0), v = table.dim(0), d = table.dim(1);
  const std::vector<double> idv = ToDoubles(ids), tv = ToDoubles(table);
  std::vector<double> ov(static_cast<size_t>(n * d), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = static_cast<int64_t>(idv[t]) - vocab_begin;
    if (row < 0 || row >= v) continue;
    for (int64_t i = 0; i < d; ++i) ov[t * d + i] = tv[row * d + i];
  }
  FromDoubles(ov, out);
}

void EmbeddingBackward(const Tensor& ids, const Tensor& dout, int64_t vocab_begin, Tensor& dtable) {
  const int64_t n = ids.dim(0), v = dtable.dim(0), d = dtable.dim(1);
  const std::vector<double> idv = ToDoubles(ids), dov = ToDoubles(dout);
  std::vector<double> dtv = ToDoubles(dtable);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = static_cast<int64_t>(idv[t]) - vocab_begin;
    if (row < 0 || row >= v) continue;
    for (int64_t i = 0; i < d; ++i) dtv[row * d + i] += dov[t * d + i];
  }
  FromDoubles(dtv, dtable);
}

}  // namespace kelvin::reference
