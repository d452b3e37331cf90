// Vocab-parallel cross-entropy on the CPU: local row statistics in the accumulation dtype, three
// all-reduces (max, sum of exp, target logit) over the tensor-parallel group. OpenMP over rows;
// f32 rows use the vectorised ExpF32 (core/ops/cpu_vector_math.h), f64 std::exp.
#include "parallel/loss/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/ops/cpu_vector_math.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dispatch.h"

namespace kelvin::parallel {
namespace {

inline float Exp(float x) { return ops::cpu::ExpF32(x); }
inline double Exp(double x) { return std::exp(x); }

// Per token: the global row max, log-sum-exp and target logit (0 for ignored rows), all [N] in
// the accumulation dtype A.
template <typename T, typename A>
void GlobalRowStatistics(Communicator& tp, const Tensor& logits, const Tensor& targets,
                         int64_t vocab_begin, Tensor& max, Tensor& lse, Tensor& target_logit) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  const T* x = logits.data<T>();
  const int32_t* t = targets.data<int32_t>();
  A* m = max.data<A>();
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    A best = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : best)
    for (int64_t j = 0; j < v; ++j) {
      const A xj = static_cast<A>(x[row * v + j]);
      best = xj > best ? xj : best;
    }
    m[row] = best;
  }
  tp.AllReduce(max, ReduceOp::kMax);
  A* s = lse.data<A>();
  A* target = target_logit.data<A>();
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    A sum = 0;
    const A row_max = m[row];
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < v; ++j) sum += Exp(static_cast<A>(x[row * v + j]) - row_max);
    s[row] = sum;
    const int64_t local = static_cast<int64_t>(t[row]) - vocab_begin;
    target[row] = t[row] != ops::kIgnoreIndex && local >= 0 && local < v
                      ? static_cast<A>(x[row * v + local])
                      : A(0);
  }
  tp.AllReduce(lse, ReduceOp::kSum);
  tp.AllReduce(target_logit, ReduceOp::kSum);  // exactly one rank holds each target
  for (int64_t row = 0; row < n; ++row) s[row] = m[row] + std::log(s[row]);
}

void CheckArguments(const Tensor& logits, const Tensor& targets, const Tensor& loss) {
  KELVIN_CHECK(logits.is_cpu() && logits.ndim() == 2)
      << "vocab-parallel cross-entropy takes host logits [N, V], got " << logits.ToString();
  ops::CheckShape(targets, {logits.dim(0)}, "vocab_parallel_cross_entropy.targets");
  ops::CheckDType(targets, DType::kI32, "vocab_parallel_cross_entropy.targets");
  ops::CheckShape(loss, {logits.dim(0)}, "vocab_parallel_cross_entropy.loss");
  ops::CheckDType(loss, AccumDType(logits.dtype()), "vocab_parallel_cross_entropy.loss");
}

// The shared forward; with `grad_scale` also the in-place gradient.
void Run(Communicator& tp, Tensor& logits, const Tensor& targets, int64_t vocab_begin,
         const double* grad_scale, Tensor& loss) {
  CheckArguments(logits, targets, loss);
  const int64_t n = logits.dim(0), v = logits.dim(1);
  const DType accum = AccumDType(logits.dtype());
  Tensor max = Tensor::Empty({n}, accum), lse = Tensor::Empty({n}, accum);  // [N]
  Tensor target_logit = Tensor::Empty({n}, accum);                          // [N]
  ops::DispatchCpuFloat(logits.dtype(), "VocabParallelSoftmaxCrossEntropy", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    GlobalRowStatistics<T, A>(tp, logits, targets, vocab_begin, max, lse, target_logit);
    const int32_t* t = targets.data<int32_t>();
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < n; ++row) {
      const bool ignored = t[row] == ops::kIgnoreIndex;
      loss.data<A>()[row] = ignored ? A(0) : lse.data<A>()[row] - target_logit.data<A>()[row];
      if (grad_scale == nullptr) continue;
      T* x = logits.data<T>() + row * v;
      if (ignored) {
        std::fill(x, x + v, T(0));
        continue;
      }
      const A scale = static_cast<A>(*grad_scale), row_lse = lse.data<A>()[row];
#pragma omp simd
      for (int64_t j = 0; j < v; ++j)
        x[j] = static_cast<T>(scale * Exp(static_cast<A>(x[j]) - row_lse));
      const int64_t local = static_cast<int64_t>(t[row]) - vocab_begin;
      if (local >= 0 && local < v) x[local] -= static_cast<T>(scale);
    }
  });
}

}  // namespace

void VocabParallelSoftmaxCrossEntropy(Communicator& tp, Tensor& logits, const Tensor& targets,
                                      int64_t vocab_begin, double grad_scale, Tensor& loss) {
  Run(tp, logits, targets, vocab_begin, &grad_scale, loss);
}

void VocabParallelCrossEntropyLoss(Communicator& tp, const Tensor& logits, const Tensor& targets,
                                   int64_t vocab_begin, Tensor& loss) {
  Tensor unchanged = logits;  // Run writes logits only when given a grad_scale
  Run(tp, unchanged, targets, vocab_begin, nullptr, loss);
}

void VocabParallelArgmax(Communicator& tp, const Tensor& logits, int64_t vocab_begin,
                         Tensor& predictions) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  ops::CheckShape(predictions, {n}, "vocab_parallel_argmax.predictions");
  // Per row: the local best value, and the negated global id (max of -id picks the lowest id).
  Tensor best = Tensor::Empty({n}, DType::kF64), id = Tensor::Empty({n}, DType::kF64);
  ops::DispatchCpuFloat(logits.dtype(), "VocabParallelArgmax", [&]<typename T>() {
    for (int64_t row = 0; row < n; ++row) {
      const T* x = logits.data<T>() + row * v;
      int64_t arg = 0;
      for (int64_t j = 1; j < v; ++j) arg = x[j] > x[arg] ? j : arg;
      best.data<double>()[row] = static_cast<double>(x[arg]);
      id.data<double>()[row] = -static_cast<double>(vocab_begin + arg);
    }
  });
  // The best value of each row over the group; the ranks that do not hold it drop out of the
  // second max, which then picks the lowest id among the ranks that do.
  Tensor global_best = Tensor::Empty({n}, DType::kF64);
  std::copy_n(best.data<double>(), n, global_best.data<double>());
  tp.AllReduce(global_best, ReduceOp::kMax);
  for (int64_t row = 0; row < n; ++row) {
    if (best.data<double>()[row] < global_best.data<double>()[row]) {
      id.data<double>()[row] = -std::numeric_limits<double>::infinity();
    }
  }
  tp.AllReduce(id, ReduceOp::kMax);
  for (int64_t row = 0; row < n; ++row) {
    predictions.data<int32_t>()[row] = static_cast<int32_t>(-id.data<double>()[row]);
  }
}

}  // namespace kelvin::parallel
