// The byte <-> character tables of the byte-level alphabet, built once.
#include "data/tokenizer/byte_level.h"

#include <array>

namespace kelvin::data {
namespace {

struct ByteLevelTables {
  std::array<uint16_t, 256> char_of_byte{};  // code point of each byte's character
  std::array<int16_t, 512> byte_of_char{};   // -1 for code points outside the alphabet

  ByteLevelTables() {
    byte_of_char.fill(-1);
    const auto keeps_itself = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      char_of_byte[b] = static_cast<uint16_t>(keeps_itself(b) ? b : 256 + shifted++);
      byte_of_char[char_of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

void AppendByteLevelChar(uint8_t b, std::string& out) {
  const uint16_t code = Tables().char_of_byte[b];
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else {  // every code point of the alphabet is below U+0800: two bytes
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

std::optional<std::string> BytesOfByteLevelChars(std::string_view chars) {
  std::string bytes;
  bytes.reserve(chars.size());
  for (size_t i = 0; i < chars.size();) {
    const auto lead = static_cast<uint8_t>(chars[i]);
    uint32_t code = 0;
    if (lead < 0x80) {
      code = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < chars.size() &&
               (static_cast<uint8_t>(chars[i + 1]) & 0xC0) == 0x80) {
      code = ((lead & 0x1Fu) << 6) | (static_cast<uint8_t>(chars[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;
    }
    if (code >= Tables().byte_of_char.size() || Tables().byte_of_char[code] < 0) {
      return std::nullopt;
    }
    bytes.push_back(static_cast<char>(Tables().byte_of_char[code]));
  }
  return bytes;
}

}  // namespace kelvin::data
