// The byte <-> character tables of the byte-level alphabet, built once.
#include "data/tokenizer/byte_level.h"

#include <array>

#include "data/tokenizer/utf8.h"

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

void AppendByteLevelChar(uint8_t b, std::string& out) { AppendUtf8(Tables().char_of_byte[b], out); }

std::optional<std::string> BytesOfByteLevelChars(std::string_view chars) {
  if (FirstInvalidUtf8(chars).has_value()) return std::nullopt;
  std::string bytes;
  bytes.reserve(chars.size());
  for (size_t i = 0, length = 0; i < chars.size(); i += length) {
    const uint32_t code = DecodeUtf8(chars, i, length);
    if (code >= Tables().byte_of_char.size() || Tables().byte_of_char[code] < 0) {
      return std::nullopt;
    }
    bytes.push_back(static_cast<char>(Tables().byte_of_char[code]));
  }
  return bytes;
}

}  // namespace kelvin::data
