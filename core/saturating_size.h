// SaturatingSize: element and byte counts that saturate at kSaturated (2^63 - 1) instead of
// wrapping, for planning jobs of any size: a huge model plans "too large" (which no device
// fits) rather than a negative count that "fits". Non-negative values only.
#pragma once

#include <cstdint>
#include <limits>

namespace kelvin {

class SaturatingSize {
 public:
  static constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

  constexpr SaturatingSize(int64_t value = 0) : value_(value < 0 ? kSaturated : value) {}  // NOLINT

  constexpr int64_t value() const { return value_; }
  constexpr bool saturated() const { return value_ == kSaturated; }

  friend constexpr SaturatingSize operator+(SaturatingSize a, SaturatingSize b) {
    int64_t sum = 0;
    return __builtin_add_overflow(a.value_, b.value_, &sum) ? kSaturated : sum;
  }
  friend constexpr SaturatingSize operator*(SaturatingSize a, SaturatingSize b) {
    int64_t product = 0;
    return __builtin_mul_overflow(a.value_, b.value_, &product) ? kSaturated : product;
  }
  // a - b for b <= a; a saturated count stays saturated.
  friend constexpr SaturatingSize operator-(SaturatingSize a, SaturatingSize b) {
    return a.saturated() || b.value_ > a.value_ ? kSaturated : a.value_ - b.value_;
  }
  friend constexpr SaturatingSize operator/(SaturatingSize a, SaturatingSize b) {
    return a.saturated() || b.value_ == 0 ? kSaturated : a.value_ / b.value_;
  }
  SaturatingSize& operator+=(SaturatingSize other) { return *this = *this + other; }

 private:
  int64_t value_;
};

}  // namespace kelvin
