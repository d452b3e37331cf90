// Hashed dropout: fast CPU and CUDA against the naive reference (in place too), the mask's
// statistics (the fraction dropped near p, two sites' masks independent), the same mask for any
// split of the rows or features (what makes every layout draw one mask), and p = 0 the identity.
#include "core/ops/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/ops/reference/dropout.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

// [N] i64: the keys of N tokens of sample 5 of seed 11, positions 0..N-1.
Tensor TokenKeys(int64_t n) {
  Tensor keys = Tensor::Empty({n}, DType::kI64);
  for (int64_t i = 0; i < n; ++i) {
    keys.data<int64_t>()[i] = static_cast<int64_t>(ops::DropoutTokenKey(11, 5, i));
  }
  return keys;
}

class DropoutTest : public ::testing::TestWithParam<Backend> {};

TEST_P(DropoutTest, MatchesReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  for (const auto& [n, f, p] : {std::tuple{1, 1, 0.5}, {71, 229, 0.1}, {33, 640, 0.75}}) {
    SCOPED_TRACE(absl::StrCat(n, " x ", f, ", p ", p));
    const Tensor x = testing::Random({n, f}, backend.dtype, 300 + n);  // [N, F]
    const Tensor keys = TokenKeys(n);                                  // [N]
    Tensor expected = Tensor::Empty({n, f}, DType::kF64);
    reference::HashedDropout(testing::Cast(x, DType::kF64), keys, 17, 3, p, expected);
    const Tensor x_d = testing::ToDevice(x, backend.device);
    const Tensor keys_d = testing::ToDevice(keys, backend.device);
    Tensor y = Tensor::Empty({n, f}, backend.dtype, backend.device);
    ops::HashedDropout(ctx, x_d, keys_d, 17, 3, p, y);
    EXPECT_TRUE(testing::AllClose(y, expected, testing::RelTolerance(backend.dtype), "y"));
    Tensor in_place = CopyToDevice(ctx, x_d, backend.device);
    ops::HashedDropout(ctx, in_place, keys_d, 17, 3, p, in_place);
    EXPECT_TRUE(testing::BitIdentical(in_place, y, "y computed over x"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DropoutTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// The zeros of y = dropout(ones) [N, F] as a 0/1 list.
std::vector<int> DroppedOf(const Tensor& keys, int64_t f, uint64_t site, int64_t feature_begin,
                           double p) {
  Tensor ones = Tensor::Empty({keys.dim(0), f}, DType::kF64);
  for (int64_t i = 0; i < ones.numel(); ++i) ones.data<double>()[i] = 1;
  ops::HashedDropout(Context::Cpu(), ones, keys, site, feature_begin, p, ones);
  std::vector<int> dropped(static_cast<size_t>(ones.numel()));
  for (int64_t i = 0; i < ones.numel(); ++i) {
    const double v = ones.data<double>()[i];
    EXPECT_TRUE(v == 0 || v == 1 / (1 - p)) << i << ": " << v;
    dropped[static_cast<size_t>(i)] = v == 0 ? 1 : 0;
  }
  return dropped;
}

// 256 x 512 elements: the fraction dropped within 4 standard deviations of p, and two sites'
// masks agreeing as independent ones do (p^2 + (1 - p)^2).
TEST(Dropout, DropsAFractionPIndependentlyPerSite) {
  constexpr int64_t kN = 256, kF = 512;
  const double count = kN * kF;
  const Tensor keys = TokenKeys(kN);
  for (const double p : {0.05, 0.3, 0.5}) {
    const std::vector<int> a = DroppedOf(keys, kF, 1, 0, p), b = DroppedOf(keys, kF, 2, 0, p);
    double dropped = 0, agree = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      dropped += a[i];
      agree += a[i] == b[i];
    }
    const double sigma = std::sqrt(p * (1 - p) / count);
    EXPECT_NEAR(dropped / count, p, 4 * sigma) << "p " << p;
    const double same = p * p + (1 - p) * (1 - p);
    EXPECT_NEAR(agree / count, same, 4 * std::sqrt(same * (1 - same) / count)) << "p " << p;
  }
}

// Rows split as context parallelism splits them and features as tensor parallelism splits a
// row-parallel input: each part's mask is the whole one's.
TEST(Dropout, TheMaskIsTheSameForAnySplit) {
  constexpr int64_t kN = 12, kF = 40;
  const Tensor keys = TokenKeys(kN);
  const std::vector<int> whole = DroppedOf(keys, kF, 9, 0, 0.4);
  const std::vector<int> right = DroppedOf(keys, kF - 15, 9, 15, 0.4);
  const Tensor late_keys = keys.Slice(7, kN);
  const std::vector<int> late = DroppedOf(late_keys, kF, 9, 0, 0.4);
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t f = 0; f < kF; ++f) {
      const int w = whole[static_cast<size_t>(n * kF + f)];
      if (f >= 15) {
        EXPECT_EQ(right[static_cast<size_t>(n * (kF - 15) + f - 15)], w) << n << "," << f;
      }
      if (n >= 7) {
        EXPECT_EQ(late[static_cast<size_t>((n - 7) * kF + f)], w) << n << "," << f;
      }
    }
  }
}

TEST(Dropout, ZeroProbabilityKeepsEveryElement) {
  const Tensor x = testing::Random({9, 31}, DType::kF32, 5);
  Tensor y = Tensor::Empty({9, 31}, DType::kF32);
  ops::HashedDropout(Context::Cpu(), x, TokenKeys(9), 4, 0, 0.0, y);
  EXPECT_TRUE(testing::BitIdentical(y, x, "y"));
  EXPECT_EQ(ops::DropoutThreshold(0.0), 0u);
  EXPECT_EQ(ops::DropoutThreshold(0.5), uint64_t{1} << 52);
}

}  // namespace
}  // namespace kelvin
