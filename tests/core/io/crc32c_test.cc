// CRC-32C, the dispatched and the portable path: the standard check value, the empty string,
// extension in pieces equal to the whole, and the eight-byte steps against a bit-at-a-time
// computation on every length and alignment up to 40.
#include "core/io/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace kelvin::io {
namespace {

uint32_t BitwiseCrc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : bytes) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

TEST(Crc32c, MatchesItsCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(internal::PortableCrc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32c, EqualsTheBitwiseDefinitionOnEveryLengthAndAlignment) {
  std::string text;
  for (int i = 0; i < 48; ++i) text.push_back(static_cast<char>(i * 37 + 11));
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t length = 0; offset + length <= 40; ++length) {
      const std::string_view piece(text.data() + offset, length);
      EXPECT_EQ(Crc32c(piece), BitwiseCrc32c(piece)) << offset << "+" << length;
      EXPECT_EQ(internal::PortableCrc32c(piece), BitwiseCrc32c(piece)) << offset << "+" << length;
    }
  }
}

TEST(Crc32c, ExtendsPieceByPiece) {
  const std::string text = "selective self-attention temperatures, sharded by head";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const std::string_view all(text);
    EXPECT_EQ(Crc32c(all.substr(cut), Crc32c(all.substr(0, cut))), Crc32c(all)) << cut;
    EXPECT_EQ(
        internal::PortableCrc32c(all.substr(cut), internal::PortableCrc32c(all.substr(0, cut))),
        Crc32c(all))
        << cut;
  }
}

}  // namespace
}  // namespace kelvin::io
