// The naive plain attention: argument checks, then the kernels. Forward: OpenMP over (row, head,
// query); each query streams its visible keys with a score buffer of at most T entries (never
// T x T). Backward: OpenMP over (row, kv head), so each thread owns the dk/dv rows it accumulates:
// no races, fixed order.
#include "bench/baselines/naive_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/dispatch.h"

namespace kelvin::bench {
namespace {

using ops::CheckDType;
using ops::CheckShape;
using ops::DispatchCpuFloat;

template <typename T>
T Dot(const T* a, const T* b, int64_t d) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

struct Dims {
  int64_t b, t, h, g, d;
  int64_t group() const { return h / g; }  // query heads per kv head
};

template <typename T>
void Forward(const Dims& dims, const T* q, const T* k, const T* v, const int32_t* positions, T* out,
             T* lse) {
  const auto [b, t, h, g, d] = dims;
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
#pragma omp parallel
  {
    std::vector<T> scores(static_cast<size_t>(t));  // [T] scores of one query
#pragma omp for collapse(3) schedule(static)
    for (int64_t row = 0; row < b; ++row) {
      for (int64_t head = 0; head < h; ++head) {
        for (int64_t i = 0; i < t; ++i) {
          const int64_t token = row * t + i;
          const int64_t kv = head / dims.group();
          const int64_t first = i - positions[token];  // the document's first token
          const T* qi = q + (token * h + head) * d;    // [d]
          T max_score = -INFINITY;
          for (int64_t j = first; j <= i; ++j) {
            const T* kj = k + ((row * t + j) * g + kv) * d;
            scores[j - first] = Dot(qi, kj, d) * scale;
            max_score = std::max(max_score, scores[j - first]);
          }
          T* oi = out + (token * h + head) * d;  // [d]
          std::fill(oi, oi + d, T(0));
          T sum = 0;
          for (int64_t j = first; j <= i; ++j) {
            const T p = std::exp(scores[j - first] - max_score);
            sum += p;
            const T* vj = v + ((row * t + j) * g + kv) * d;
#pragma omp simd
            for (int64_t e = 0; e < d; ++e) oi[e] += p * vj[e];
          }
          const T inv = T(1) / sum;
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) oi[e] *= inv;
          lse[token * h + head] = max_score + std::log(sum);
        }
      }
    }
  }
}

template <typename T>
void Backward(const Dims& dims, const T* dout, const T* q, const T* k, const T* v,
              const int32_t* positions, const T* out, const T* lse, T* dq, T* dk, T* dv) {
  const auto [b, t, h, g, d] = dims;
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t row = 0; row < b; ++row) {
    for (int64_t kv = 0; kv < g; ++kv) {
      for (int64_t j = 0; j < t; ++j) {
        std::fill_n(dk + ((row * t + j) * g + kv) * d, d, T(0));
        std::fill_n(dv + ((row * t + j) * g + kv) * d, d, T(0));
      }
      for (int64_t head = kv * dims.group(); head < (kv + 1) * dims.group(); ++head) {
        for (int64_t i = 0; i < t; ++i) {
          const int64_t token = row * t + i;
          const T* qi = q + (token * h + head) * d;
          const T* doi = dout + (token * h + head) * d;
          T* dqi = dq + (token * h + head) * d;
          std::fill(dqi, dqi + d, T(0));
          const T delta = Dot(doi, out + (token * h + head) * d, d);  // D_i = dO_i . O_i
          const T row_lse = lse[token * h + head];
          for (int64_t j = i - positions[token]; j <= i; ++j) {
            const int64_t key = (row * t + j) * g + kv;
            const T* kj = k + key * d;
            const T* vj = v + key * d;
            const T p = std::exp(Dot(qi, kj, d) * scale - row_lse);
            const T ds = p * (Dot(doi, vj, d) - delta) * scale;  // dS_ij, scale folded in
            T* dkj = dk + key * d;
            T* dvj = dv + key * d;
#pragma omp simd
            for (int64_t e = 0; e < d; ++e) {
              dqi[e] += ds * kj[e];
              dkj[e] += ds * qi[e];
              dvj[e] += p * doi[e];
            }
          }
        }
      }
    }
  }
}

void CheckArguments(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& positions, const Tensor& lse) {
  KELVIN_CHECK_EQ(q.ndim(), 3) << "attention.q must be [N, H, d], got " << q.ToString();
  const int64_t n = q.dim(0), h = q.dim(1), d = q.dim(2);
  KELVIN_CHECK_EQ(n, shape.batch * shape.seq) << "attention.q rows vs batch x seq";
  KELVIN_CHECK_EQ(k.ndim(), 3) << "attention.k must be [N, G, d], got " << k.ToString();
  const int64_t g = k.dim(1);
  KELVIN_CHECK(g > 0 && h % g == 0)
      << "attention: " << h << " query heads are not a multiple of " << g << " kv heads";
  CheckShape(k, {n, g, d}, "attention.k");
  CheckShape(v, {n, g, d}, "attention.v");
  CheckShape(positions, {n}, "attention.positions");
  CheckDType(positions, DType::kI32, "attention.positions");
  CheckShape(lse, {n, h}, "attention.lse");
  CheckDType(lse, AccumDType(q.dtype()), "attention.lse");
  CheckDType(k, q.dtype(), "attention.k");
  CheckDType(v, q.dtype(), "attention.v");
  KELVIN_CHECK(q.is_cpu() && k.is_cpu() && v.is_cpu()) << "the naive attention runs on the CPU";
  // Kernels index keys [t - p_t, t]: positions must count up from 0 within each document.
  const int32_t* p = positions.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = i % shape.seq;
    KELVIN_CHECK(p[i] == 0 || (t > 0 && p[i] == p[i - 1] + 1))
        << "attention.positions[" << i << "] = " << p[i] << " after " << (t > 0 ? p[i - 1] : -1)
        << ": position ids must restart at 0 or count up by one within a row";
  }
}

Dims DimsOf(const AttentionShape& shape, const Tensor& q, const Tensor& k) {
  return {shape.batch, shape.seq, q.dim(1), k.dim(1), q.dim(2)};
}

}  // namespace

void NaiveAttentionForward(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse) {
  CheckArguments(shape, q, k, v, positions, lse);
  CheckShape(out, q.shape(), "attention.out");
  CheckDType(out, q.dtype(), "attention.out");
  DispatchCpuFloat(q.dtype(), "AttentionForward", [&]<typename T>() {
    Forward<T>(DimsOf(shape, q, k), q.data<T>(), k.data<T>(), v.data<T>(),
               positions.data<int32_t>(), out.data<T>(), lse.data<T>());
  });
}

void NaiveAttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& positions,
                            const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk,
                            Tensor& dv) {
  CheckArguments(shape, q, k, v, positions, lse);
  const std::pair<const Tensor*, const char*> like_q[] = {
      {&dout, "attention.dout"}, {&out, "attention.out"}, {&dq, "attention.dq"}};
  for (const auto& [t, name] : like_q) {
    CheckShape(*t, q.shape(), name);
    CheckDType(*t, q.dtype(), name);
  }
  const std::pair<const Tensor*, const char*> like_k[] = {{&dk, "attention.dk"},
                                                          {&dv, "attention.dv"}};
  for (const auto& [t, name] : like_k) {
    CheckShape(*t, k.shape(), name);
    CheckDType(*t, q.dtype(), name);
  }
  DispatchCpuFloat(q.dtype(), "AttentionBackward", [&]<typename T>() {
    Backward<T>(DimsOf(shape, q, k), dout.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(),
                positions.data<int32_t>(), out.data<T>(), lse.data<T>(), dq.data<T>(), dk.data<T>(),
                dv.data<T>());
  });
}

}  // namespace kelvin::bench
