// tokenizer.json's normalizer: the steps Llama-family files use, in order. NFC (Qwen2), and the
// SentencePiece-style pair of Llama-2 and its kin: Prepend("▁") (before a non-empty text) and
// Replace(" " -> "▁"); a Sequence of those. Any other normalizer is an error naming it.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

class Normalizer {
 public:
  // From the "normalizer" value (null: none); errors name `where` and the step.
  static absl::StatusOr<Normalizer> Parse(const nlohmann::json& value, const std::string& where);

  bool empty() const { return steps_.empty(); }
  // `text` normalized (valid UTF-8 in, valid UTF-8 out).
  std::string Apply(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kNfc, kPrepend, kReplace } kind;
    std::string text;         // Prepend's text, Replace's pattern
    std::string replacement;  // Replace's content
  };
  std::vector<Step> steps_;
};

// `text` with every (non-overlapping, leftmost first) `pattern` replaced by `replacement`.
std::string ReplaceAll(std::string_view text, std::string_view pattern,
                       std::string_view replacement);

}  // namespace kelvin::data
