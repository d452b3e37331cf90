// Finite-difference gradients.
#include "tests/testing/gradcheck.h"

#include "core/ops/reference/values.h"
#include "tests/testing/compare.h"
#include "tests/testing/tolerance.h"

namespace kelvin::testing {

Tensor NumericalGradient(const std::function<double()>& loss, Tensor& input) {
  KELVIN_CHECK(input.is_cpu() && input.dtype() == DType::kF64)
      << "finite differences need an f64 host tensor, got " << input.ToString();
  Tensor grad = Tensor::ZerosCpu(input.shape(), DType::kF64);
  double* x = input.data<double>();
  for (int64_t i = 0; i < input.numel(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFiniteDifferenceStep;
    const double up = loss();
    x[i] = saved - kFiniteDifferenceStep;
    const double down = loss();
    x[i] = saved;
    grad.data<double>()[i] = (up - down) / (2 * kFiniteDifferenceStep);
  }
  return grad;
}

::testing::AssertionResult GradientMatches(const std::function<double()>& loss, Tensor& input,
                                           const Tensor& analytic, const std::string& what) {
  const Tensor numerical = NumericalGradient(loss, input);
  return AllClose(analytic, numerical, kFiniteDifferenceRelTol, what + " (vs finite differences)");
}

double Dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = reference::ToDoubles(a), bv = reference::ToDoubles(b);
  KELVIN_CHECK_EQ(av.size(), bv.size());
  double sum = 0;
  for (size_t i = 0; i < av.size(); ++i) sum += av[i] * bv[i];
  return sum;
}

}  // namespace kelvin::testing
