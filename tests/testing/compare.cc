// Tensor comparison with informative failure messages.
#include "tests/testing/compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/copy.h"
#include "core/ops/reference/values.h"
#include "tests/testing/tensors.h"

namespace kelvin::testing {

ErrorReport CompareTensors(const Tensor& actual, const Tensor& expected) {
  KELVIN_CHECK_EQ(actual.numel(), expected.numel())
      << actual.ToString() << " vs " << expected.ToString();
  const std::vector<double> a = reference::ToDoubles(ToHost(actual));
  const std::vector<double> e = reference::ToDoubles(ToHost(expected));
  ErrorReport report;
  double diff_sq = 0, ref_sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    if (!std::isfinite(a[i]) && std::isfinite(e[i])) report.has_nan = true;
    diff_sq += err * err;
    ref_sq += e[i] * e[i];
    if (err > report.max_abs_error || (std::isnan(err) && !std::isnan(report.max_abs_error))) {
      report.max_abs_error = err;
      report.max_index = static_cast<int64_t>(i);
      report.actual_at_max = a[i];
      report.expected_at_max = e[i];
    }
  }
  report.rel_error = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  return report;
}

::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rel_tol,
                                    const std::string& what) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << what << ": shape " << ShapeToString(actual.shape())
                                         << " != expected " << ShapeToString(expected.shape());
  }
  const ErrorReport r = CompareTensors(actual, expected);
  std::ostringstream msg;
  msg << what << " " << actual.ToString() << ": rel error " << r.rel_error << " (tolerance "
      << rel_tol << "), max abs error " << r.max_abs_error << " at flat index " << r.max_index
      << " (actual " << r.actual_at_max << ", expected " << r.expected_at_max << ")";
  if (r.has_nan) msg << ", non-finite values where the reference is finite";
  if (r.has_nan || !(r.rel_error <= rel_tol)) return ::testing::AssertionFailure() << msg.str();
  return ::testing::AssertionSuccess() << msg.str();
}

::testing::AssertionResult BitIdentical(const Tensor& actual, const Tensor& expected,
                                        const std::string& what) {
  if (actual.shape() != expected.shape() || actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure()
           << what << ": " << actual.ToString() << " vs " << expected.ToString();
  }
  const Tensor a = ToHost(actual), e = ToHost(expected);
  const size_t elem = DTypeSize(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pe = static_cast<const unsigned char*>(e.raw_data());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * elem, pe + i * elem, elem) != 0) {
      const auto av = reference::ToDoubles(a), ev = reference::ToDoubles(e);
      return ::testing::AssertionFailure()
             << what << " differs first at flat index " << i << ": " << av[i] << " vs " << ev[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kelvin::testing
