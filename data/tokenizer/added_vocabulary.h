// tokenizer.json's added_tokens as tokenizers assigns and matches them. Ids: the file's ids are
// not used (tokenizers warns when they differ, and so does Kelvin): a token whose content the
// vocabulary spells has that id, any other the next id after the vocabulary's entries and the
// tokens added before it. Matching: leftmost-longest in the raw text for tokens with
// "normalized": false, in the normalized text (against their normalized contents) for the others;
// lstrip/rstrip take the whitespace beside a match into it. "single_word" is refused by name.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/bpe_model.h"
#include "data/tokenizer/normalizer.h"

namespace kelvin::data {

// A stretch [begin, end) of a text: an added token's id, or text to encode (id < 0).
struct TextSegment {
  size_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // From the "added_tokens" value (null: none); errors name `where` and the entry.
  static absl::StatusOr<AddedVocabulary> Parse(const nlohmann::json& value, const BpeModel& model,
                                               const Normalizer& normalizer,
                                               const std::string& where);

  // The segments of `text` (in order, covering it) by the tokens matched in raw text
  // (`normalized` false) or in normalized text (true).
  std::vector<TextSegment> Split(std::string_view text, bool normalized) const;
  bool has_normalized() const { return !normalized_.tokens.empty(); }

  // The token of added token `id` as tokenizers decodes it (its content, normalized for a
  // "normalized" token), or nullptr.
  const std::string* Token(int32_t id) const;
  std::optional<int32_t> Id(std::string_view content) const;
  // Whether `token` is a special token's content (as tokenizers, a normalized token whose
  // normalizer changed its content is not: decode keeps it even with skip_special_tokens).
  bool IsSpecial(const std::string& token) const { return special_.contains(token); }
  int32_t max_id() const { return max_id_; }

 private:
  struct Match {
    std::string pattern;  // what is matched: the content, normalized for normalized tokens
    int32_t id;
    bool lstrip, rstrip;
  };
  struct MatchSet {
    std::vector<Match> tokens;       // longest pattern first
    std::array<bool, 256> starts{};  // [b]: some pattern starts with byte b
  };
  static void Index(MatchSet& set);

  MatchSet raw_, normalized_;
  std::unordered_map<int32_t, std::string> token_of_id_;
  std::unordered_map<std::string, int32_t, SpellingHash, std::equal_to<>> id_of_content_;
  std::unordered_set<std::string> special_;
  int32_t max_id_ = -1;
};

}  // namespace kelvin::data
