// Temperature histograms: values land in their 0.05-wide bins (outliers in the end bins), the
// mean is the values', tanh(z) is recovered by taking off 1 and each head's sigma(alpha) ln(p + 1)
// to count the values near the range's bounds, and clamped values count as on the clamp instead.
#include "ssa/temperature_histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kelvin::ssa {
namespace {

Tensor Values(const std::vector<double>& values, int64_t heads) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size()) / heads, heads}, DType::kF32);
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i]);
  return t;
}

Tensor Positions(const std::vector<int32_t>& positions) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(positions.size())}, DType::kI32);
  for (size_t i = 0; i < positions.size(); ++i) t.data<int32_t>()[i] = positions[i];
  return t;
}

TEST(TemperatureHistogram, BinsAndBoundsWithThePositionTerm) {
  const SsaOptions options;
  // Tokens at positions 0 and 2 (ln(p + 1) = 0 and ln 3) of two heads with slopes 0 and 0.5, so
  // head 1's range at position 2 is [0.5 ln 3, 2 + 0.5 ln 3] = [0.549, 2.549].
  const std::vector<double> slopes = {0.0, 0.5};
  TemperatureHistogram h;
  AddToTemperatureHistogram(options, Values({0.02, 1.0, 1.97, 2.52}, 2), Positions({0, 2}), slopes,
                            h);
  EXPECT_EQ(h.count, 4);
  EXPECT_NEAR(h.mean(), (0.02 + 1.0 + 1.97 + 2.52) / 4, 1e-6);
  EXPECT_EQ(h.counts[0], 1);   // 0.02 in [0, 0.05)
  EXPECT_EQ(h.counts[20], 1);  // 1.0 in [1.0, 1.05)
  EXPECT_EQ(h.counts[39], 1);  // 1.97 in [1.95, 2.0)
  EXPECT_EQ(h.counts[50], 1);  // 2.52 in [2.5, 2.55)
  // tanh z: -0.98 (near the lower bound), 0, 0.97 (near the upper), 2.52 - 1 - 0.5 ln 3 = 0.971
  // (near the upper: without the position term it would be 1.52, impossible for a tanh).
  EXPECT_EQ(h.near_lower, 1);
  EXPECT_EQ(h.near_upper, 2);
  EXPECT_EQ(h.at_clamp, 0);
  // The same value at position 0 of head 1 would lie outside the range; at a tanh z of 0.85
  // (2.4 at position 2) it is not near a bound.
  TemperatureHistogram inside;
  AddToTemperatureHistogram(options, Values({1.0, 2.4}, 2), Positions({2}), slopes, inside);
  EXPECT_EQ(inside.near_lower + inside.near_upper, 0);
}

TEST(TemperatureHistogram, OutliersGoToTheEndBinsAndClampedValuesOnTheClamp) {
  SsaOptions options;
  options.temperature_clamp = TemperatureClamp{0.9, 1.1};
  TemperatureHistogram h;
  AddToTemperatureHistogram(options, Values({0.9, 1.0, 1.1, -0.2, 7.0}, 1),
                            Positions({0, 1, 2, 3, 4}), {}, h);
  EXPECT_EQ(h.at_clamp, 4);  // 0.9 and 1.1 on the clamp, -0.2 and 7.0 beyond it
  EXPECT_EQ(h.counts[0], 1);
  EXPECT_EQ(h.counts[TemperatureHistogram::kBins - 1], 1);
  EXPECT_EQ(h.near_lower + h.near_upper, 0);
}

TEST(TemperatureHistogram, WithoutTheTokenTermNothingIsNearABound) {
  SsaOptions options;
  options.token_aware = false;
  TemperatureHistogram h;
  AddToTemperatureHistogram(options, Values({0.01, 1.99}, 1), Positions({0, 1}), {}, h);
  EXPECT_EQ(h.count, 2);
  EXPECT_EQ(h.near_lower + h.near_upper, 0);
}

}  // namespace
}  // namespace kelvin::ssa
