// Cross-entropy CPU kernels: OpenMP over rows; each row's log-sum-exp streams through the row in
// chunks of kVocabChunk (chunk max, then sum of exp against the running max, rescaling the running
// sum when the max grows), so the chunk is read twice from L1 and the row once from memory.
// N tokens, V vocabulary. f32 rows use the vectorised ExpF32 (core/ops/cpu_vector_math.h) in
// kernels compiled for AVX2 too; f64 (tests) uses std::exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/ops/cpu_vector_math.h"
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

inline float Exp(float x) { return ExpF32(x); }
inline double Exp(double x) { return std::exp(x); }

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
    for (int64_t i = begin; i < end; ++i) chunk_sum += Exp(x[i] - new_max);
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
  for (int64_t i = 0; i < v; ++i) x[i] = scale * Exp(x[i] - lse);
  x[target] -= scale;
}

KELVIN_SIMD_CLONES float RowLogSumExpF32(const float* x, int64_t v) { return RowLogSumExp(x, v); }
KELVIN_SIMD_CLONES void WriteRowGradientF32(float* x, int64_t v, int32_t target, float lse,
                                            float scale) {
  WriteRowGradient(x, v, target, lse, scale);
}

// The row kernels by dtype: the f32 ones through their AVX2-cloned instances.
template <typename T>
T LogSumExpOfRow(const T* x, int64_t v) {
  if constexpr (std::is_same_v<T, float>) {
    return RowLogSumExpF32(x, v);
  } else {
    return RowLogSumExp(x, v);
  }
}
template <typename T>
void GradientOfRow(T* x, int64_t v, int32_t target, T lse, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    WriteRowGradientF32(x, v, target, lse, scale);
  } else {
    WriteRowGradient(x, v, target, lse, scale);
  }
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
    lse[row] = LogSumExpOfRow(x, v);
    loss[row] = RowLoss(x, targets[row], lse[row]);
  }
}

template <typename T>
void Backward(T* logits, const int32_t* targets, const T* lse, int64_t n, int64_t v,
              double grad_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    GradientOfRow(logits + row * v, v, targets[row], lse[row], static_cast<T>(grad_scale));
  }
}

template <typename T>
void Fused(T* logits, const int32_t* targets, int64_t n, int64_t v, double grad_scale, T* loss) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    T* x = logits + row * v;  // [V]
    const T lse = LogSumExpOfRow(x, v);
    loss[row] = RowLoss(x, targets[row], lse);
    GradientOfRow(x, v, targets[row], lse, static_cast<T>(grad_scale));
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
