// GPT-2's byte-level alphabet, which byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2) work in:
// each of the 256 byte values is one printable Unicode character (the printable ASCII and Latin-1
// bytes stand for themselves, the other 68 for U+0100..U+0143 in byte order), so that any bytes,
// valid UTF-8 or not, have a spelling in the vocabulary's strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kelvin::data {

// Appends the UTF-8 spelling of byte `b`'s character (1 or 2 bytes) to `out`.
void AppendByteLevelChar(uint8_t b, std::string& out);

// The bytes a byte-level spelling stands for (each character one byte), or nullopt when `chars`
// holds a character outside the alphabet or is not UTF-8.
std::optional<std::string> BytesOfByteLevelChars(std::string_view chars);

}  // namespace kelvin::data
