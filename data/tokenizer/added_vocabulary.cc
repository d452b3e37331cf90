// Added tokens: id assignment in file order, and the leftmost-longest scan that splits a text.
#include "data/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "data/tokenizer/tokenizer_json.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

// Unicode's White_Space characters (what lstrip and rstrip take, as Rust's \s).
bool IsWhiteSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The start of the whitespace that ends text[0, end).
size_t WhiteSpaceBefore(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t length = 0;
    if (!IsWhiteSpace(DecodeUtf8(text, start, length))) break;
    end = start;
  }
  return end;
}

// The end of the whitespace that starts text[begin, ...).
size_t WhiteSpaceAfter(std::string_view text, size_t begin) {
  size_t length = 0;
  while (begin < text.size() && IsWhiteSpace(DecodeUtf8(text, begin, length))) begin += length;
  return begin;
}

}  // namespace

void AddedVocabulary::Index(MatchSet& set) {
  std::stable_sort(set.tokens.begin(), set.tokens.end(), [](const Match& a, const Match& b) {
    return a.pattern.size() > b.pattern.size();
  });
  for (const Match& token : set.tokens) set.starts[static_cast<uint8_t>(token.pattern[0])] = true;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::Parse(const json& value, const BpeModel& model,
                                                       const Normalizer& normalizer,
                                                       const std::string& where) {
  AddedVocabulary vocabulary;
  if (value.is_null()) return vocabulary;
  if (!value.is_array()) return WrongType(where, "an array", value);
  struct Flags {
    bool special, normalized, lstrip, rstrip;
    bool operator==(const Flags&) const = default;
  };
  std::unordered_map<std::string, std::pair<Flags, size_t>> seen;  // content -> flags, index
  int64_t moved = 0;
  std::string first_moved;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& token = value[i];
    const std::string at = absl::StrCat(where, "[", i, "]");
    if (!token.is_object() || !token.contains("content") || !token["content"].is_string() ||
        !token.contains("id") || !token["id"].is_number_integer()) {
      return WrongType(at, "{\"id\": id, \"content\": text, ...}", token);
    }
    // tokenizers reads the id as a u32 and refuses the file otherwise; within that range it
    // assigns its own ids (below), whatever the file says.
    if (!token["id"].is_number_unsigned() || token["id"].get<uint64_t>() > UINT32_MAX) {
      return WrongType(at + ".id", "an id in [0, 2^32), as tokenizers reads it", token["id"]);
    }
    const std::string content = token["content"];
    if (FirstInvalidUtf8(content).has_value()) return WrongType(at, "UTF-8 content", token);
    KELVIN_RETURN_IF_ERROR(RequireAbsentOr(token, at, "single_word", false));
    Flags flags;
    KELVIN_ASSIGN_OR_RETURN(flags.special, OptionalBool(token, at, "special", false));
    // tokenizers' default: special tokens are matched in the raw text, others normalized.
    KELVIN_ASSIGN_OR_RETURN(flags.normalized,
                            OptionalBool(token, at, "normalized", !flags.special));
    KELVIN_ASSIGN_OR_RETURN(flags.lstrip, OptionalBool(token, at, "lstrip", false));
    KELVIN_ASSIGN_OR_RETURN(flags.rstrip, OptionalBool(token, at, "rstrip", false));
    if (content.empty()) continue;  // tokenizers ignores it
    if (const auto before = seen.find(content); before != seen.end()) {
      if (before->second.first == flags) continue;  // tokenizers ignores a repeat
      return absl::InvalidArgumentError(
          absl::StrCat(at, " repeats the content \"", content.substr(0, 80), "\" of ", where, "[",
                       before->second.second,
                       "] with other flags: Kelvin does not guess which applies; keep "
                       "one of them"));
    }
    seen.emplace(content, std::pair{flags, i});
    const int64_t entries = model.entries();
    int32_t id;
    if (const std::optional<int32_t> spelled = model.Id(content); spelled.has_value()) {
      id = *spelled;
    } else if (vocabulary.id_of_content_.empty()) {
      id = static_cast<int32_t>(entries);
    } else {  // tokenizers: after the largest added id, or the vocabulary's size when below it
      const int32_t largest = vocabulary.max_id_;
      id = largest >= entries || entries == 0 ? largest + 1 : static_cast<int32_t>(entries);
    }
    if (token["id"] != id && moved++ == 0) {
      first_moved = absl::StrCat(at, " \"", content.substr(0, 80), "\" has the id ",
                                 token["id"].dump(), " in the file and ", id, " in tokenizers");
    }
    Match match{flags.normalized ? normalizer.Apply(content) : content, id, flags.lstrip,
                flags.rstrip};
    vocabulary.id_of_content_.emplace(content, id);
    vocabulary.token_of_id_[id] = match.pattern;  // tokenizers decodes the normalized content
    vocabulary.max_id_ = std::max(vocabulary.max_id_, id);
    if (flags.special) vocabulary.special_.insert(content);
    if (match.pattern.empty()) continue;  // a content the normalizer erases matches nothing
    (flags.normalized ? vocabulary.normalized_ : vocabulary.raw_).tokens.push_back(match);
  }
  if (moved > 0) {
    KLOG(WARNING) << moved << " of " << where << " get another id than the file gives them ("
                  << first_moved << "): Kelvin uses tokenizers' ids";
  }
  Index(vocabulary.raw_);
  Index(vocabulary.normalized_);
  return vocabulary;
}

std::vector<TextSegment> AddedVocabulary::Split(std::string_view text, bool normalized) const {
  const MatchSet& set = normalized ? normalized_ : raw_;
  std::vector<TextSegment> segments;
  size_t kept = 0;  // text[0, kept) is in `segments`
  for (size_t i = 0; i < text.size();) {
    const Match* match = nullptr;
    if (set.starts[static_cast<uint8_t>(text[i])]) {
      for (const Match& token : set.tokens) {  // longest first: the first match is the longest
        if (text.compare(i, token.pattern.size(), token.pattern) == 0) {
          match = &token;
          break;
        }
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + match->pattern.size();
    if (match->lstrip) begin = std::max(WhiteSpaceBefore(text, begin), kept);
    if (match->rstrip) end = WhiteSpaceAfter(text, end);
    if (kept < begin) segments.push_back({kept, begin, -1});
    segments.push_back({begin, end, match->id});
    kept = end;
    i += match->pattern.size();  // as tokenizers, the next match is searched after this one's
  }                              // own end, even where rstrip took more
  if (kept < text.size()) segments.push_back({kept, text.size(), -1});
  return segments;
}

const std::string* AddedVocabulary::Token(int32_t id) const {
  const auto it = token_of_id_.find(id);
  return it == token_of_id_.end() ? nullptr : &it->second;
}

std::optional<int32_t> AddedVocabulary::Id(std::string_view content) const {
  const auto it = id_of_content_.find(content);
  if (it == id_of_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kelvin::data
