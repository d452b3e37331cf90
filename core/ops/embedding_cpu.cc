// Embedding CPU kernels: OpenMP over tokens for the lookup; over column blocks for the scatter-add,
// where each thread adds every token of its columns in token order (bit-identical results for any
// thread count). N tokens, V vocabulary rows held here, D hidden.
#include <algorithm>

#include "core/ops/dispatch.h"
#include "core/ops/embedding.h"

namespace kelvin::ops::cpu {
namespace {

using internal::ShardRow;

constexpr int64_t kColumnBlock = 64;

template <typename T>
void Forward(const int32_t* ids, const T* table, int64_t vocab_begin, int64_t n, int64_t v,
             int64_t d, T* out) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = ShardRow(ids[t], vocab_begin, v);
    T* out_row = out + t * d;  // [D]
    if (row < 0) {
      std::fill(out_row, out_row + d, T(0));
    } else {
      std::copy(table + row * d, table + (row + 1) * d, out_row);
    }
  }
}

template <typename T>
void Backward(const int32_t* ids, const T* dout, int64_t vocab_begin, int64_t n, int64_t v,
              int64_t d, T* dtable) {
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kColumnBlock, end = std::min(d, begin + kColumnBlock);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = ShardRow(ids[t], vocab_begin, v);
      if (row < 0) continue;
      const T* dout_row = dout + t * d;  // [D]
      T* dtable_row = dtable + row * d;  // [D]
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) dtable_row[i] += dout_row[i];
    }
  }
}

}  // namespace

void EmbeddingForward(const Tensor& ids, const Tensor& table, int64_t vocab_begin, Tensor& out) {
  DispatchCpuFloat(table.dtype(), "EmbeddingForward", [&]<typename T>() {
    Forward<T>(ids.data<int32_t>(), table.data<T>(), vocab_begin, ids.dim(0), table.dim(0),
               table.dim(1), out.data<T>());
  });
}

void EmbeddingBackward(const Tensor& ids, const Tensor& dout, int64_t vocab_begin, Tensor& dtable) {
  DispatchCpuFloat(dout.dtype(), "EmbeddingBackward", [&]<typename T>() {
    Backward<T>(ids.data<int32_t>(), dout.data<T>(), vocab_begin, ids.dim(0), dtable.dim(0),
                dtable.dim(1), dtable.data<T>());
  });
}

}  // namespace kelvin::ops::cpu
