// Naive sum of squares: a plain f64 loop.
#include "core/ops/reference/grad_norm.h"

#include "core/ops/reference/values.h"

namespace kelvin::reference {

double SumOfSquares(const Tensor& x) {
  double sum = 0;
  for (const double v : ToDoubles(x)) sum += v * v;
  return sum;
}

}  // namespace kelvin::reference
