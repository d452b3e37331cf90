// Unicode normalization form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15), the "NFC" normalizer of tokenizer.json (Qwen2's). The Unicode facts are
// tables generated from Python's unicodedata (unicode_nfc_tables.inc, tools/make_unicode_tables.py;
// Unicode 14.0.0), Hangul syllables by formula.
#pragma once

#include <string>
#include <string_view>

namespace kelvin::data {

// NFC of `text`, which must be valid UTF-8 (the tokenizer checks it first).
std::string NfcNormalize(std::string_view text);

// The Unicode version the tables hold.
std::string_view NfcUnicodeVersion();

}  // namespace kelvin::data
