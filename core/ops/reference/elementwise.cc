// Naive elementwise ops in f64: one loop over the flat values each.
#include "core/ops/reference/elementwise.h"

#include <algorithm>
#include <cmath>

#include "core/ops/reference/values.h"

namespace kelvin::reference {
namespace {

// The bf16 value nearest to v (ties to even), as a double. bf16 keeps 8 significant bits and the
// f32 exponent range: normal values v = f * 2^e (f in [0.5, 1)) have a unit in the last place of
// 2^(e - 8), and subnormals share the smallest one, 2^-133. Past the largest bf16 the result
// reaches 2^128, which converts to inf.
double RoundToBf16(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  int exponent;
  std::frexp(v, &exponent);
  const double ulp = std::ldexp(1.0, std::max(exponent - 8, -133));
  return std::nearbyint(v / ulp) * ulp;  // the default rounding mode: to nearest, ties to even
}

}  // namespace

void Add(const Tensor& a, const Tensor& b, Tensor& out) {
  const std::vector<double> av = ToDoubles(a), bv = ToDoubles(b);
  std::vector<double> ov(av.size());
  for (size_t i = 0; i < av.size(); ++i) ov[i] = av[i] + bv[i];
  FromDoubles(ov, out);
}

void AddBackward(const Tensor& dout, Tensor& da, Tensor& db) {
  // out = a + b: d out / d a = d out / d b = 1.
  const std::vector<double> g = ToDoubles(dout);
  FromDoubles(g, da);
  FromDoubles(g, db);
}

void Scale(const Tensor& x, double alpha, Tensor& out) {
  std::vector<double> v = ToDoubles(x);
  for (double& e : v) e *= alpha;
  FromDoubles(v, out);
}

void ScaleBackward(const Tensor& dout, double alpha, Tensor& dx) { Scale(dout, alpha, dx); }

void Axpy(double alpha, const Tensor& x, Tensor& y) {
  const std::vector<double> xv = ToDoubles(x);
  std::vector<double> yv = ToDoubles(y);
  for (size_t i = 0; i < yv.size(); ++i) yv[i] += alpha * xv[i];
  FromDoubles(yv, y);
}

void Cast(const Tensor& x, Tensor& out) {
  std::vector<double> v = ToDoubles(x);
  if (out.dtype() == DType::kBF16) {
    for (double& e : v) e = RoundToBf16(e);  // exact in bf16 now: FromDoubles rounds no further
  }
  FromDoubles(v, out);
}

void CastBackward(const Tensor& dout, Tensor& dx) { Cast(dout, dx); }

}  // namespace kelvin::reference
