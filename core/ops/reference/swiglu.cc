// Naive SwiGLU: out = g * sigmoid(g) * u and its hand-derived backward, in f64.
#include "core/ops/reference/swiglu.h"

#include <cmath>

#include "core/ops/reference/values.h"

namespace kelvin::reference {
namespace {

double Sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

}  // namespace

void SwiGluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  const std::vector<double> g = ToDoubles(gate), u = ToDoubles(up);
  std::vector<double> o(g.size());
  for (size_t i = 0; i < g.size(); ++i) o[i] = g[i] * Sigmoid(g[i]) * u[i];
  FromDoubles(o, out);
}

void SwiGluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate,
                    Tensor& dup) {
  const std::vector<double> dy = ToDoubles(dout), g = ToDoubles(gate), u = ToDoubles(up);
  std::vector<double> dg(g.size()), du(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    // silu(g) = g s with s = sigmoid(g), ds/dg = s (1 - s): d silu / dg = s + g s (1 - s).
    const double s = Sigmoid(g[i]);
    du[i] = dy[i] * g[i] * s;
    dg[i] = dy[i] * u[i] * (s + g[i] * s * (1 - s));
  }
  FromDoubles(dg, dgate);
  FromDoubles(du, dup);
}

}  // namespace kelvin::reference
