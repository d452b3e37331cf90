// Histograms of the temperatures a model produces, the SSA study's view of docs/ssa.md's question
// (do the temperatures use their range, or sit at its bounds?): counts in fixed bins, and how often
// the token-aware term tanh(z) = tau - 1 - sigma(alpha) ln n lies within 5% of the range's ends
// (|tanh z| >= 0.95, the temperature near sigma(alpha) ln n or 2 + sigma(alpha) ln n) or, with a
// clamp, the temperature on a clamp bound.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ssa/ssa_options.h"

namespace kelvin::ssa {

struct TemperatureHistogram {
  static constexpr double kLow = 0.0;        // the first bin's lower edge
  static constexpr double kBinWidth = 0.05;  // dimensionless, as the temperatures
  static constexpr int kBins = 60;           // [0, 3): values outside go to the end bins
  static constexpr double kNearBound = 0.95;

  std::vector<int64_t> counts = std::vector<int64_t>(kBins, 0);
  int64_t count = 0;
  int64_t near_lower = 0, near_upper = 0;  // tanh(z) <= -0.95, >= 0.95
  int64_t at_clamp = 0;                    // on the clamp's lo or hi
  double sum = 0;
  double mean() const { return count > 0 ? sum / static_cast<double>(count) : 0; }
};

// Adds tau [N, K] (a host tensor, f32 or f64) to `histogram`: token t's position is positions[t]
// ([N] i32) and head k's position slope sigma_alpha[k] (empty: no position term, as for tau^v).
// Under `options` (token_aware off: tanh(z) is 0, never near a bound).
void AddToTemperatureHistogram(const SsaOptions& options, const Tensor& tau,
                               const Tensor& positions, std::span<const double> sigma_alpha,
                               TemperatureHistogram& histogram);

}  // namespace kelvin::ssa
