// A pre-tokenizer regex (tokenizers' Split with behavior "Isolated", and ByteLevel's built-in
// GPT-2 pattern) compiled by PCRE2 with UTF, UCP (\s, \p{L}, \p{N} by Unicode properties, as
// Oniguruma in tokenizers) and JIT. Llama-3's pattern needs a look-ahead, which RE2 lacks.
// The work of one Split is bounded by its text's length: each start position gets PCRE2's match
// limit (doubled while a match needs more), and all of them together at most a budget of PCRE2
// steps and of CPU time linear in the text (the CPU time catches look-aheads that scan the rest of
// the text at every position, which PCRE2 does not count as steps), so a regex that backtracks or
// scans too much fails with an error naming it instead of running for minutes.
#pragma once

#include <cstdint>
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

// What one Split may spend, per byte of its text plus a base: PCRE2 match-limit steps (the
// byte-level patterns take about 1 per byte) and CPU time (they take about 0.03 us per byte).
inline constexpr uint64_t kSplitStepsPerByte = 256;
inline constexpr uint64_t kSplitStepsBase = uint64_t{1} << 20;
inline constexpr double kSplitCpuSecondsPerByte = 1e-6;
inline constexpr double kSplitCpuSecondsBase = 0.1;

class SplitRegex {
 public:
  // An error names `source` (e.g. "tokenizer.json pre_tokenizer.pretokenizers[0]"), the pattern
  // (its first 80 characters) and where in it PCRE2 stopped.
  static absl::StatusOr<SplitRegex> Compile(const std::string& pattern, const std::string& source);

  // Appends to `pieces` the matches of the pattern in `text` and the stretches between them, in
  // order, none empty (their concatenation is `text`). `text` must be valid UTF-8 (checked by the
  // caller once). An error (the work bound, PCRE2's JIT stack) names the regex and the offset.
  absl::Status Split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  SplitRegex(std::shared_ptr<pcre2_real_code_8> code, std::string name)
      : code_(std::move(code)), name_(std::move(name)) {}
  std::shared_ptr<pcre2_real_code_8> code_;  // shared: matching is thread-safe, copies are cheap
  std::string name_;  // "SOURCE regex \"first 80 characters...\"", for errors
};

}  // namespace kelvin::data
