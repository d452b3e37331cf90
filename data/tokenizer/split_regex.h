// A pre-tokenizer regex (tokenizers' Split with behavior "Isolated", and ByteLevel's built-in
// GPT-2 pattern) compiled by PCRE2 with UTF, UCP (\s, \p{L}, \p{N} by Unicode properties, as
// Oniguruma in tokenizers) and JIT. Llama-3's pattern needs a look-ahead, which RE2 lacks.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct pcre2_real_code_8;

namespace kelvin::data {

// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex: true).
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class SplitRegex {
 public:
  // An error names `source` (e.g. "tokenizer.json pre_tokenizer.pretokenizers[0]") and where in
  // the pattern PCRE2 stopped.
  static absl::StatusOr<SplitRegex> Compile(const std::string& pattern, const std::string& source);

  // Appends to `pieces` the matches of the pattern in `text` and the stretches between them, in
  // order, none empty (their concatenation is `text`). `text` must be valid UTF-8 (checked by the
  // caller once). An error (PCRE2's match or JIT stack limits) names the piece's length.
  absl::Status Split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  explicit SplitRegex(std::shared_ptr<pcre2_real_code_8> code) : code_(std::move(code)) {}
  std::shared_ptr<pcre2_real_code_8> code_;  // shared: matching is thread-safe, copies are cheap
};

}  // namespace kelvin::data
