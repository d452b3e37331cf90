// UTF-8 for the tokenizer: validation, and decoding and encoding of code points. One place for
// the byte rules that the byte-level alphabet, the regex splits, NFC and the chat formats use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kelvin::data {

// The offset of the first byte of `text` that is not part of valid UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF included), or nullopt.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// The length of the character `lead` starts in valid UTF-8 (1 to 4).
inline size_t Utf8Length(uint8_t lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The code point at text[at] of valid UTF-8; `length` gets its byte count.
uint32_t DecodeUtf8(std::string_view text, size_t at, size_t& length);

void AppendUtf8(uint32_t code, std::string& out);

}  // namespace kelvin::data
