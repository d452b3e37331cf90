// NFC over code points: decompose (tables, Hangul by formula), order the runs of combining marks
// by class (stable), then compose each mark with the last starter it is not blocked from.
#include "data/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

struct CombiningClass {
  uint32_t code;
  uint8_t combining_class;
};
struct Decomposition {
  uint32_t code;
  uint16_t offset;  // into kDecompositionData
  uint8_t length;
};
struct Composition {
  uint32_t first, second, composite;
};

#include "data/tokenizer/unicode_nfc_tables.inc"

// Hangul syllables: S = SBase + (L - LBase) * NCount + (V - VBase) * TCount + (T - TBase).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t ClassOf(uint32_t code) {
  const auto it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), code,
                                   [](const CombiningClass& c, uint32_t x) { return c.code < x; });
  return it != std::end(kCombiningClasses) && it->code == code ? it->combining_class : 0;
}

void AppendDecomposition(uint32_t code, std::vector<uint32_t>& out) {
  if (code >= kSBase && code < kSBase + kSCount) {
    const uint32_t s = code - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), code,
                                   [](const Decomposition& d, uint32_t x) { return d.code < x; });
  if (it == std::end(kDecompositions) || it->code != code) {
    out.push_back(code);
    return;
  }
  out.insert(out.end(), kDecompositionData + it->offset,
             kDecompositionData + it->offset + it->length);
}

// The primary composite of (first, second), or 0.
uint32_t Compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto it =
      std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair{first, second},
                       [](const Composition& c, const std::pair<uint32_t, uint32_t>& key) {
                         return c.first != key.first ? c.first < key.first : c.second < key.second;
                       });
  return it != std::end(kCompositions) && it->first == first && it->second == second ? it->composite
                                                                                     : 0;
}

}  // namespace

std::string_view NfcUnicodeVersion() { return kUnicodeVersion; }

std::string NfcNormalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) {
    return std::string(text);  // ASCII is in NFC
  }
  std::vector<uint32_t> codes;  // the full canonical decomposition
  for (size_t i = 0, length = 0; i < text.size(); i += length) {
    AppendDecomposition(DecodeUtf8(text, i, length), codes);
  }
  // Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < codes.size();) {
    if (ClassOf(codes[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < codes.size() && ClassOf(codes[end]) != 0) ++end;
    std::stable_sort(codes.begin() + static_cast<std::ptrdiff_t>(i),
                     codes.begin() + static_cast<std::ptrdiff_t>(end),
                     [](uint32_t a, uint32_t b) { return ClassOf(a) < ClassOf(b); });
    i = end;
  }
  // Canonical composition (UAX #15's sample algorithm).
  size_t starter = 0, written = 1;
  int last_class = ClassOf(codes[0]) == 0 ? 0 : 256;  // 256: no starter yet
  for (size_t i = 1; i < codes.size(); ++i) {
    const uint32_t code = codes[i];
    const int code_class = ClassOf(code);
    // Only a starter composes (no primary composite starts with a combining mark).
    const uint32_t composite =
        last_class == 256 || ClassOf(codes[starter]) != 0 ? 0 : Compose(codes[starter], code);
    if (composite != 0 && (last_class < code_class || last_class == 0)) {
      codes[starter] = composite;
      continue;
    }
    if (code_class == 0) starter = written;
    last_class = code_class;
    codes[written++] = code;
  }
  codes.resize(written);
  std::string out;
  out.reserve(text.size());
  for (const uint32_t code : codes) AppendUtf8(code, out);
  return out;
}

}  // namespace kelvin::data
