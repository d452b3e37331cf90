// bfloat16 storage type with round-to-nearest-even conversion from f32, usable on host and device.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KELVIN_HOST_DEVICE __host__ __device__
#else
#define KELVIN_HOST_DEVICE
#endif

namespace kelvin {

// Bit layout of IEEE f32 truncated to its top 16 bits (1 sign, 8 exponent, 7 mantissa).
// Layout-compatible with CUDA's __nv_bfloat16, so device code may reinterpret it.
struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  KELVIN_HOST_DEVICE explicit bf16(float value) : bits(FromFloatBits(value)) {}
  KELVIN_HOST_DEVICE explicit operator float() const { return ToFloat(bits); }

  static KELVIN_HOST_DEVICE bf16 FromBits(uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }

  // Round to nearest, ties to even. NaN stays NaN (quiet, sign kept); overflow rounds to +-inf
  // exactly as IEEE round-to-nearest does.
  static KELVIN_HOST_DEVICE uint16_t FromFloatBits(float value) {
    uint32_t u = FloatBits(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return static_cast<uint16_t>(u >> 16);
  }

  static KELVIN_HOST_DEVICE float ToFloat(uint16_t b) {
    return BitsFloat(static_cast<uint32_t>(b) << 16);
  }

 private:
  static KELVIN_HOST_DEVICE uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
#endif
  }
  static KELVIN_HOST_DEVICE float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
#endif
  }
};

static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

// Rounds a float to the nearest bf16 value and returns it as float (the value a bf16 store keeps).
KELVIN_HOST_DEVICE inline float RoundToBf16(float value) {
  return bf16::ToFloat(bf16::FromFloatBits(value));
}

}  // namespace kelvin
