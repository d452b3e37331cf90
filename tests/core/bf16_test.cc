// bf16 conversion: round to nearest even, ties, NaN, infinities, overflow and exact values.
#include "core/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kelvin {
namespace {

float FromBits32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

TEST(Bf16, ExactValuesRoundTrip) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f, 3.0e38f}) {
    const float rounded = RoundToBf16(v);
    EXPECT_EQ(RoundToBf16(rounded), rounded) << v;
  }
  EXPECT_EQ(static_cast<float>(bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(-2.0f).bits, 0xc000);
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly halfway between bf16 1.0 (mantissa even) and 1 + 2^-7: ties to even.
  EXPECT_EQ(bf16(FromBits32(0x3f808000u)).bits, 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up to even.
  EXPECT_EQ(bf16(FromBits32(0x3f818000u)).bits, 0x3f82);
  // Just above halfway rounds up, just below rounds down.
  EXPECT_EQ(bf16(FromBits32(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(bf16(FromBits32(0x3f807fffu)).bits, 0x3f80);
  // Negative values round symmetrically.
  EXPECT_EQ(bf16(FromBits32(0xbf808001u)).bits, 0xbf81);
}

TEST(Bf16, NonFiniteAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16(inf).bits, 0x7f80);
  EXPECT_EQ(bf16(-inf).bits, 0xff80);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must stay NaN, not become infinity.
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(FromBits32(0x7f800001u)))));
  // The largest finite f32 is past the largest bf16 plus half an ulp: rounds to infinity.
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80);
  // Subnormals keep their top bits.
  EXPECT_EQ(bf16(FromBits32(0x00010000u)).bits, 0x0001);
}

TEST(Bf16, RelativeErrorIsAtMostHalfAnUlp) {
  for (int i = 1; i < 20000; ++i) {
    const float v = static_cast<float>(i) * 0.0137f - 100.0f;
    const float r = RoundToBf16(v);
    EXPECT_LE(std::abs(r - v), std::abs(v) * std::ldexp(1.0f, -8) * 1.0001f) << v;
  }
}

}  // namespace
}  // namespace kelvin
