// Naive attention: S = q k^T / sqrt(d) with the document-causal mask, P = softmax(S), O = P v;
// backward dP = dO v^T, dS = P * (dP - rowsum(P * dP)), dq = dS k / sqrt(d), dk = dS^T q / sqrt(d),
// dv = P^T dO, in f64 with the full [T, T] matrices.
#include "core/ops/reference/attention.h"

#include <cmath>
#include <vector>

#include "core/ops/reference/values.h"

namespace kelvin::reference {
namespace {

struct Problem {
  int64_t b, t, h, g, d;
  std::vector<double> q, k, v;     // [N, H, d], [N, G, d], [N, G, d]
  std::vector<int32_t> positions;  // [N]

  Problem(const AttentionShape& shape, const Tensor& qt, const Tensor& kt, const Tensor& vt,
          const Tensor& pt)
      : b(shape.batch),
        t(shape.seq),
        h(qt.dim(1)),
        g(kt.dim(1)),
        d(qt.dim(2)),
        q(ToDoubles(qt)),
        k(ToDoubles(kt)),
        v(ToDoubles(vt)),
        positions(pt.data<int32_t>(), pt.data<int32_t>() + pt.numel()) {}

  bool Visible(int64_t row, int64_t i, int64_t j) const {
    return j <= i && j >= i - positions[row * t + i];
  }
  double Q(int64_t row, int64_t i, int64_t head, int64_t e) const {
    return q[((row * t + i) * h + head) * d + e];
  }
  int64_t KvIndex(int64_t row, int64_t j, int64_t head, int64_t e) const {
    return ((row * t + j) * g + head / (h / g)) * d + e;
  }
  // P [T, T] of one (row, head); masked entries 0. Also the row log-sum-exps.
  std::vector<double> Probabilities(int64_t row, int64_t head, std::vector<double>* lse) const {
    std::vector<double> p(static_cast<size_t>(t * t), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (int64_t i = 0; i < t; ++i) {
      double max_s = -INFINITY;
      for (int64_t j = 0; j < t; ++j) {
        if (!Visible(row, i, j)) continue;
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += Q(row, i, head, e) * k[KvIndex(row, j, head, e)];
        p[i * t + j] = s * scale;
        max_s = std::max(max_s, s * scale);
      }
      double sum = 0;
      for (int64_t j = 0; j < t; ++j) {
        if (Visible(row, i, j)) sum += std::exp(p[i * t + j] - max_s);
      }
      for (int64_t j = 0; j < t; ++j) {
        p[i * t + j] = Visible(row, i, j) ? std::exp(p[i * t + j] - max_s) / sum : 0.0;
      }
      if (lse != nullptr) (*lse)[(row * t + i) * h + head] = max_s + std::log(sum);
    }
    return p;
  }
};

}  // namespace

void AttentionForward(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse) {
  const Problem pr(shape, q, k, v, positions);
  std::vector<double> o(pr.q.size(), 0.0), l(static_cast<size_t>(lse.numel()));
  for (int64_t row = 0; row < pr.b; ++row) {
    for (int64_t head = 0; head < pr.h; ++head) {
      const std::vector<double> p = pr.Probabilities(row, head, &l);
      for (int64_t i = 0; i < pr.t; ++i) {
        for (int64_t j = 0; j < pr.t; ++j) {
          for (int64_t e = 0; e < pr.d; ++e) {
            o[((row * pr.t + i) * pr.h + head) * pr.d + e] +=
                p[i * pr.t + j] * pr.v[pr.KvIndex(row, j, head, e)];
          }
        }
      }
    }
  }
  FromDoubles(o, out);
  FromDoubles(l, lse);
}

void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& dq,
                       Tensor& dk, Tensor& dv) {
  const Problem pr(shape, q, k, v, positions);
  const std::vector<double> dov = ToDoubles(dout);
  std::vector<double> dqv(pr.q.size(), 0.0), dkv(pr.k.size(), 0.0), dvv(pr.v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(pr.d));
  const int64_t t = pr.t, d = pr.d;
  for (int64_t row = 0; row < pr.b; ++row) {
    for (int64_t head = 0; head < pr.h; ++head) {
      const std::vector<double> p = pr.Probabilities(row, head, nullptr);
      auto dO = [&](int64_t i, int64_t e) { return dov[((row * t + i) * pr.h + head) * d + e]; };
      std::vector<double> dp(static_cast<size_t>(t * t), 0.0);  // dP = dO v^T
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < t; ++j) {
          for (int64_t e = 0; e < d; ++e)
            dp[i * t + j] += dO(i, e) * pr.v[pr.KvIndex(row, j, head, e)];
        }
      }
      for (int64_t i = 0; i < t; ++i) {
        double row_dot = 0;  // sum_j P_ij dP_ij
        for (int64_t j = 0; j < t; ++j) row_dot += p[i * t + j] * dp[i * t + j];
        for (int64_t j = 0; j < t; ++j) {
          const double ds = p[i * t + j] * (dp[i * t + j] - row_dot);
          for (int64_t e = 0; e < d; ++e) {
            dqv[((row * t + i) * pr.h + head) * d + e] +=
                ds * pr.k[pr.KvIndex(row, j, head, e)] * scale;
            dkv[pr.KvIndex(row, j, head, e)] += ds * pr.Q(row, i, head, e) * scale;
            dvv[pr.KvIndex(row, j, head, e)] += p[i * t + j] * dO(i, e);
          }
        }
      }
    }
  }
  FromDoubles(dqv, dq);
  FromDoubles(dkv, dk);
  FromDoubles(dvv, dv);
}

}  // namespace kelvin::reference
