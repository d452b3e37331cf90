// Python string semantics on UTF-8 text (see text.h).
#include "data/chat_template/text.h"

#include <cstdint>
#include <cstdio>

#include "data/tokenizer/utf8.h"

namespace kelvin::chat_template {
namespace {

// Python's str.isspace() characters: Unicode White_Space plus the separators U+001C..U+001F.
constexpr std::string_view kPythonSpaces[] = {
    "\t",     "\n",     "\v",     "\f",     "\r",     " ",      "\x1c",   "\x1d",
    "\x1e",   "\x1f",   "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
    "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
    "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};

// The byte length of the code point at `text`[pos]: 1 for a byte that starts no complete one.
size_t CodePointLength(std::string_view text, size_t pos) {
  const size_t length = data::Utf8Length(static_cast<uint8_t>(text[pos]));
  if (pos + length > text.size()) return 1;
  for (size_t i = 1; i < length; ++i) {
    if ((static_cast<unsigned char>(text[pos + i]) & 0xC0) != 0x80) return 1;
  }
  return length;
}

// Non-printable code points (str.isprintable() false) beyond ASCII that Python's repr escapes:
// C1 controls, the non-space separators and common format characters.
bool PythonEscapes(uint32_t code) {
  return (code >= 0x80 && code <= 0xA0) || code == 0xAD || code == 0x1680 ||
         (code >= 0x2000 && code <= 0x200F) || (code >= 0x2028 && code <= 0x202F) ||
         (code >= 0x205F && code <= 0x2064) || code == 0x3000 || code == 0xFEFF;
}

}  // namespace

size_t PythonSpaceAt(std::string_view text, size_t pos) {
  for (const std::string_view space : kPythonSpaces) {
    if (text.substr(pos).starts_with(space)) return space.size();
  }
  return 0;
}

size_t PythonSpaceBefore(std::string_view text, size_t end) {
  for (const std::string_view space : kPythonSpaces) {
    if (text.substr(0, end).ends_with(space)) return space.size();
  }
  return 0;
}

std::string_view StripPythonSpace(std::string_view text, bool front, bool back) {
  if (front) {
    while (size_t n = text.empty() ? 0 : PythonSpaceAt(text, 0)) text.remove_prefix(n);
  }
  if (back) {
    while (size_t n = text.empty() ? 0 : PythonSpaceBefore(text, text.size()))
      text.remove_suffix(n);
  }
  return text;
}

std::string_view StripCharacters(std::string_view text, std::string_view chars, bool front,
                                 bool back) {
  const std::vector<size_t> char_offsets = CodePointOffsets(chars);
  const auto strippable = [&](std::string_view piece) {
    for (size_t i = 0; i + 1 < char_offsets.size(); ++i) {
      if (chars.substr(char_offsets[i], char_offsets[i + 1] - char_offsets[i]) == piece)
        return true;
    }
    return false;
  };
  const std::vector<size_t> offsets = CodePointOffsets(text);
  size_t first = 0, last = offsets.size() - 1;  // code points [first, last)
  while (front && first < last &&
         strippable(text.substr(offsets[first], offsets[first + 1] - offsets[first]))) {
    ++first;
  }
  while (back && last > first &&
         strippable(text.substr(offsets[last - 1], offsets[last] - offsets[last - 1]))) {
    --last;
  }
  return text.substr(offsets[first], offsets[last] - offsets[first]);
}

std::vector<size_t> CodePointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size(); pos += CodePointLength(text, pos)) offsets.push_back(pos);
  offsets.push_back(text.size());
  return offsets;
}

std::string PythonStringRepr(std::string_view text) {
  const bool double_quote =
      text.find('\'') != std::string_view::npos && text.find('"') == std::string_view::npos;
  const char quote = double_quote ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < text.size();) {
    size_t length = CodePointLength(text, pos);
    // An invalid byte stands for itself (its value, as the 1-byte code point it is counted as).
    const uint32_t code =
        length == 1 ? static_cast<uint8_t>(text[pos]) : data::DecodeUtf8(text, pos, length);
    char escaped[16];
    if (code == static_cast<unsigned char>(quote) || code == '\\') {
      out += '\\';
      out += static_cast<char>(code);
    } else if (code == '\n') {
      out += "\\n";
    } else if (code == '\r') {
      out += "\\r";
    } else if (code == '\t') {
      out += "\\t";
    } else if (code < 0x20 || code == 0x7F || (code <= 0xFF && PythonEscapes(code))) {
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", code);
      out += escaped;
    } else if (PythonEscapes(code)) {
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", code);
      out += escaped;
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
  }
  out += quote;
  return out;
}

}  // namespace kelvin::chat_template
