// Binning the temperatures and recovering tanh(z) from each (temperature_histogram.h).
#include "ssa/temperature_histogram.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace kelvin::ssa {

void AddToTemperatureHistogram(const SsaOptions& options, const Tensor& tau,
                               const Tensor& positions, std::span<const double> sigma_alpha,
                               TemperatureHistogram& histogram) {
  KELVIN_CHECK(tau.is_cpu() && positions.is_cpu() && tau.shape().size() == 2 &&
               positions.numel() == tau.dim(0))
      << "temperature histograms take host tensors tau [N, K] and positions [N], got "
      << tau.ToString() << " and " << positions.ToString();
  KELVIN_CHECK(sigma_alpha.empty() || static_cast<int64_t>(sigma_alpha.size()) == tau.dim(1));
  const int64_t tokens = tau.dim(0), heads = tau.dim(1);
  const std::optional<TemperatureClamp>& clamp = options.temperature_clamp;
  for (int64_t t = 0; t < tokens; ++t) {
    const double log_n = std::log(static_cast<double>(positions.data<int32_t>()[t]) + 1.0);
    for (int64_t k = 0; k < heads; ++k) {
      const double value = tau.dtype() == DType::kF64
                               ? tau.data<double>()[t * heads + k]
                               : static_cast<double>(tau.data<float>()[t * heads + k]);
      const int bin = static_cast<int>(
          std::floor((value - TemperatureHistogram::kLow) / TemperatureHistogram::kBinWidth));
      ++histogram.counts[std::clamp(bin, 0, TemperatureHistogram::kBins - 1)];
      ++histogram.count;
      histogram.sum += value;
      if (clamp.has_value() && (value <= clamp->lo || value >= clamp->hi)) {
        ++histogram.at_clamp;
        continue;  // the clamp hides tanh(z)
      }
      if (!options.token_aware) continue;
      const double tanh_z = value - 1.0 - (sigma_alpha.empty() ? 0.0 : sigma_alpha[k] * log_n);
      if (tanh_z <= -TemperatureHistogram::kNearBound) ++histogram.near_lower;
      if (tanh_z >= TemperatureHistogram::kNearBound) ++histogram.near_upper;
    }
  }
}

}  // namespace kelvin::ssa
