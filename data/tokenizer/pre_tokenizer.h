// tokenizer.json's pre_tokenizer: how normalized text is cut into the pieces the BPE model
// encodes one by one. Byte-level files: Split regexes (behavior Isolated), Digits (SmolLM's,
// StarCoder's) and a final ByteLevel step (GPT-2's pattern when use_regex is on), the model then
// working on bytes. SentencePiece-
// style files: none (the whole text is one piece) or Metaspace (spaces become "▁", a "▁" is
// prepended by the prepend_scheme, and with split each "▁" starts a piece). Other steps are
// errors naming them.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/split_regex.h"

namespace kelvin::data {

class PreTokenizer {
 public:
  // From the "pre_tokenizer" value (null: none); errors name `where` and the step.
  static absl::StatusOr<PreTokenizer> Parse(const nlohmann::json& value, const std::string& where);

  // A ByteLevel step: the model's units are bytes in the byte alphabet.
  bool byte_level() const { return byte_level_; }

  // Appends the pieces of `text` to `pieces`; they view `text` or `storage` (which Metaspace
  // fills with the text it rewrites). `at_text_start`: `text` begins the input (offset 0), where
  // prepend_scheme "first" prepends. An error names a Split regex that ran out of its work bound.
  absl::Status Split(std::string_view text, bool at_text_start, std::string& storage,
                     std::vector<std::string_view>& pieces) const;

 private:
  struct Metaspace {
    std::string replacement;  // one character, "▁"
    enum class Prepend { kFirst, kAlways, kNever } prepend;
    bool split;
  };
  static absl::StatusOr<Metaspace> ParseMetaspace(const nlohmann::json& step,
                                                  const std::string& where);

  std::vector<SplitRegex> splits_;  // applied in order, each to every piece of the one before
  std::optional<Metaspace> metaspace_;
  bool byte_level_ = false;
};

}  // namespace kelvin::data
