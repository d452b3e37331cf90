// tokenizer.json's decoder: from the tokens of some ids (vocabulary spellings and added tokens'
// contents) to text, step by step as tokenizers' decoders run: ByteLevel (the byte alphabet back
// to bytes), Replace (a string), ByteFallback (<0xNN> runs to their UTF-8, or one U+FFFD per byte
// when they are not UTF-8), Fuse (one token), Strip (characters at either end of each token),
// Metaspace ("▁" to spaces), a Sequence of those, or none (tokens joined by spaces).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

class TokenDecoder {
 public:
  // From the "decoder" value; errors name `where` and the step.
  static absl::StatusOr<TokenDecoder> Parse(const nlohmann::json& value, const std::string& where);

  // The text of `tokens`. Byte-level bytes that are not UTF-8 are kept as they are (tokenizers
  // shows U+FFFD for them).
  std::string Decode(std::vector<std::string> tokens) const;
  // A ByteLevel step: the tokens are spelled in the byte alphabet.
  bool byte_level() const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern;             // Replace's pattern; Strip's and Metaspace's character
    std::string replacement;         // Replace's content
    size_t start = 0, stop = 0;      // Strip: at most this many characters at either end
    bool strip_first_token = false;  // Metaspace: the first token loses its "▁" characters
  };
  static absl::StatusOr<Step> ParseStep(const nlohmann::json& step, const std::string& where);

  std::vector<Step> steps_;
  bool join_with_spaces_ = false;  // no decoder: tokenizers joins the tokens with " "
};

}  // namespace kelvin::data
