// CRC-32C: the SSE4.2 crc32 instruction where the CPU has it (checked once at run time), else
// slicing-by-8, where table[k][b] is the CRC of byte b followed by k zero bytes, so eight input
// bytes fold into the running CRC with eight lookups.
#include "core/io/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kelvin::io {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    t[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

// The next eight bytes at p as a little-endian number.
uint64_t LoadLittleEndian64(const unsigned char* p) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(p[i]) << (8 * i);
  return value;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardwareCrc32c(const unsigned char* p, size_t n,
                                                          uint32_t crc) {
  uint64_t wide = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);  // x86 is little-endian
    wide = _mm_crc32_u64(wide, word);
  }
  crc = static_cast<uint32_t>(wide);
  for (; n > 0; --n, ++p) crc = _mm_crc32_u8(crc, *p);
  return crc;
}

bool HasHardwareCrc32c() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

namespace internal {

uint32_t PortableCrc32c(std::string_view bytes, uint32_t crc_so_far) {
  static const Tables t = MakeTables();
  uint32_t crc = ~crc_so_far;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t word = LoadLittleEndian64(p) ^ crc;
    const auto low = static_cast<uint32_t>(word), high = static_cast<uint32_t>(word >> 32);
    crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24] ^
          t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^
          t[0][high >> 24];
  }
  for (; n > 0; --n, ++p) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace internal

uint32_t Crc32c(std::string_view bytes, uint32_t crc_so_far) {
#if defined(__x86_64__)
  if (HasHardwareCrc32c()) {
    return ~HardwareCrc32c(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                           ~crc_so_far);
  }
#endif
  return internal::PortableCrc32c(bytes, crc_so_far);
}

}  // namespace kelvin::io
