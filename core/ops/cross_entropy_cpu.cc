// Cross-entropy CPU kernels: OpenMP over rows; each row's log-sum-exp streams through the row in
// chunks of kVocabChunk (chunk max, then sum of exp against the running max, rescaling the running
// sum when the max grows), so the chunk is read twice from L1 and the row once from memory.
// N tokens, V vocabulary.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/cross_entropy.h"
#include "core/ops/dispatch.h"

namespace kelvin::ops::cpu {
namespace {

// Aborts on a target outside [0, V) that is not kIgnoreIndex (checked before the parallel loops).
void CheckTargets(const Tensor& targets, int64_t v) {
  const int32_t* t = targets.data<int32_t>();  // [N]
  for (int64_t row = 0; row < targets.numel(); ++row) {
    KELVIN_CHECK(t[row] == kIgnoreIndex || (t[row] >= 0 && t[row] < v))
        << "cross_entropy.targets[" << row << "] = " << t[row] << " is outside [0, " << v
        << ") and is not kIgnoreIndex (" << kIgnoreIndex << ")";
  }
}

// log(sum_i exp(x_i)) of one row x [V].
template <typename T>
T RowLogSumExp(const T* x, int64_t v) {
  T running_max = -std::numeric_limits<T>::infinity(), running_sum = 0;
  for (int64_t begin = 0; begin < v; begin += kVocabChunk) {
    const int64_t end = std::min(v, begin + kVocabChunk);
    T chunk_max = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : chunk_max)
    for (int64_t i = begin; i < end; ++i) chunk_max = x[i] > chunk_max ? x[i] : chunk_max;
    const T new_max = std::max(running_max, chunk_max);
    T chunk_sum = 0;
#pragma omp simd reduction(+ : chunk_sum)
    for (int64_t i = begin; i < end; ++i) chunk_sum += std::exp(x[i] - new_max);
    running_sum = running_sum * std::exp(running_max - new_max) + chunk_sum;
    running_max = new_max;
  }
  return running_max + std::log(running_sum);
}

// x [V] <- scale * (exp(x - lse) - onehot(target)), or zeros for an ignored row.
template <typename T>
void WriteRowGradient(T* x, int64_t v, int32_t target, T lse, T scale) {
  if (target == kIgnoreIndex) {
    std::fill(x, x + v, T(0));
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < v; ++i) x[i] = scale * std::exp(x[i] - lse);
  x[target] -= scale;
}

template <typename T>
T RowLoss(const T* x, int32_t target, T lse) {
  return target == kIgnoreIndex ? T(0) : lse - x[target];
}

template <typename T>
void Forward(const T* logits, const int32_t* targets, int64_t n, int64_t v, T* loss, T* lse) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* x = logits + row * v;  // [V]
    lse[row] = RowLogSumExp(x, v);
    loss[row] = RowLoss(x, targets[row], lse[row]);
  }
}

template <typename T>
void Backward(T* logits, const int32_t* targets, const T* lse, int64_t n, int64_t v,
              double grad_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    WriteRowGradient(logits + row * v, v, targets[row], lse[row], static_cast<T>(grad_scale));
  }
}

template <typename T>
void Fused(T* logits, const int32_t* targets, int64_t n, int64_t v, double grad_scale, T* loss) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    T* x = logits + row * v;  // [V]
    const T lse = RowLogSumExp(x, v);
    loss[row] = RowLoss(x, targets[row], lse);
    WriteRowGradient(x, v, targets[row], lse, static_cast<T>(grad_scale));
  }
}

}  // namespace

void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  CheckTargets(targets, v);
  DispatchCpuFloat(logits.dtype(), "CrossEntropyForward", [&]<typename T>() {
    Forward<T>(logits.data<T>(), targets.data<int32_t>(), n, v, loss.data<T>(), lse.data<T>());
  });
}

void CrossEntropyBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                          double grad_scale) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  CheckTargets(targets, v);
  DispatchCpuFloat(logits.dtype(), "CrossEntropyBackward", [&]<typename T>() {
    Backward<T>(logits.data<T>(), targets.data<int32_t>(), lse.data<T>(), n, v, grad_scale);
  });
}

void SoftmaxCrossEntropy(Tensor& logits, const Tensor& targets, double grad_scale, Tensor& loss) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  CheckTargets(targets, v);
  DispatchCpuFloat(logits.dtype(), "SoftmaxCrossEntropy", [&]<typename T>() {
    Fused<T>(logits.data<T>(), targets.data<int32_t>(), n, v, grad_scale, loss.data<T>());
  });
}

}  // namespace kelvin::ops::cpu
