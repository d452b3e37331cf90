// Naive hashed dropout: each element's hash as a uniform number in [0, 1), kept when it is >= p
// and then divided by 1 - p, in f64.
#include "core/ops/reference/dropout.h"

#include <cmath>
#include <vector>

#include "core/ops/dropout.h"
#include "core/ops/reference/values.h"

namespace kelvin::reference {

void HashedDropout(const Tensor& x, const Tensor& token_keys, uint64_t site, int64_t feature_begin,
                   double p, Tensor& y) {
  const std::vector<double> in = ToDoubles(x);
  std::vector<double> out(in.size());
  const int64_t rows = x.dim(0), features = x.dim(1);
  for (int64_t n = 0; n < rows; ++n) {
    const auto key = static_cast<uint64_t>(token_keys.data<int64_t>()[n]);
    for (int64_t f = 0; f < features; ++f) {
      const uint64_t hash =
          ops::Mix64(key ^ ops::Mix64(ops::Mix64(site) ^ static_cast<uint64_t>(feature_begin + f)));
      const double u = std::ldexp(static_cast<double>(hash >> 11), -53);
      const size_t i = static_cast<size_t>(n * features + f);
      out[i] = u >= p ? in[i] / (1 - p) : 0.0;
    }
  }
  FromDoubles(out, y);
}

}  // namespace kelvin::reference
