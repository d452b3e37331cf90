// Python's string operations on UTF-8 text, as chat templates use them: whitespace as str.strip()
// sees it, code points as len() and slicing count them, repr() of a string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kelvin::chat_template {

// The byte length of the Python whitespace character (str.isspace()) at `text`[pos], else 0.
size_t PythonSpaceAt(std::string_view text, size_t pos);
// The byte length of the Python whitespace character ending at `text`[end - 1], else 0.
size_t PythonSpaceBefore(std::string_view text, size_t end);

// str.strip() / lstrip() / rstrip() without an argument: Python's whitespace.
std::string_view StripPythonSpace(std::string_view text, bool front, bool back);
// str.strip(chars): the code points of `chars`.
std::string_view StripCharacters(std::string_view text, std::string_view chars, bool front,
                                 bool back);

// The byte offset of each code point of `text` (UTF-8; an invalid byte counts as one), then
// text.size(): code point i is [offsets[i], offsets[i + 1]).
std::vector<size_t> CodePointOffsets(std::string_view text);

// Python's repr() of a string: quoted with ' (or " when it holds ' and no "), backslashes and
// non-printable characters escaped.
std::string PythonStringRepr(std::string_view text);

}  // namespace kelvin::chat_template
