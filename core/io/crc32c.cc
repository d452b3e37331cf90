// CRC-32C by slicing-by-8: table[k][b] is the CRC of byte b followed by k zero bytes, so eight
// input bytes fold into the running CRC with eight lookups.
#include "core/io/crc32c.h"

#include <array>

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

}  // namespace

uint32_t Crc32c(std::string_view bytes, uint32_t crc_so_far) {
  static const Tables t = MakeTables();
  uint32_t crc = ~crc_so_far;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t low = 0, high = 0;  // the next eight bytes, little-endian
    for (int i = 0; i < 4; ++i) {
      low |= static_cast<uint32_t>(p[i]) << (8 * i);
      high |= static_cast<uint32_t>(p[4 + i]) << (8 * i);
    }
    low ^= crc;
    crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24] ^
          t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^
          t[0][high >> 24];
  }
  for (; n > 0; --n, ++p) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace kelvin::io
