// Parsing the pre-tokenizer's steps, and the split of a text into pieces.
#include "data/tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/tokenizer_json.h"

namespace kelvin::data {

using nlohmann::json;

absl::StatusOr<PreTokenizer::Metaspace> PreTokenizer::ParseMetaspace(const json& step,
                                                                     const std::string& where) {
  Metaspace metaspace;
  KELVIN_ASSIGN_OR_RETURN(metaspace.replacement, OneCharacter(step, where, "replacement"));
  const json scheme = Field(step, "prepend_scheme");
  if (scheme.is_null()) {  // files from tokenizers < 0.15 say add_prefix_space (default true)
    KELVIN_ASSIGN_OR_RETURN(const bool prepend,
                            OptionalBool(step, where, "add_prefix_space", true));
    metaspace.prepend = prepend ? Metaspace::Prepend::kAlways : Metaspace::Prepend::kNever;
  } else if (scheme == "first") {
    metaspace.prepend = Metaspace::Prepend::kFirst;
  } else if (scheme == "always") {
    metaspace.prepend = Metaspace::Prepend::kAlways;
  } else if (scheme == "never") {
    metaspace.prepend = Metaspace::Prepend::kNever;
  } else {
    return Unsupported(where + ".prepend_scheme", scheme);
  }
  KELVIN_ASSIGN_OR_RETURN(metaspace.split, OptionalBool(step, where, "split", true));
  return metaspace;
}

absl::StatusOr<PreTokenizer> PreTokenizer::Parse(const json& value, const std::string& where) {
  PreTokenizer pre_tokenizer;
  if (value.is_null()) return pre_tokenizer;
  KELVIN_ASSIGN_OR_RETURN(const auto steps, SequenceSteps(value, where, "pretokenizers"));
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, at] = steps[i];
    const std::string type = JsonType(*step);
    if (type == "Split") {
      KELVIN_RETURN_IF_ERROR(RequireAbsentOr(*step, at, "behavior", "Isolated"));
      KELVIN_RETURN_IF_ERROR(RequireAbsentOr(*step, at, "invert", false));
      const auto pattern = step->find("pattern");
      if (pattern == step->end() || !pattern->is_object() || !pattern->contains("Regex") ||
          !(*pattern)["Regex"].is_string()) {
        return Unsupported(at + ".pattern", Field(*step, "pattern"));
      }
      KELVIN_ASSIGN_OR_RETURN(SplitRegex split,
                              SplitRegex::Compile((*pattern)["Regex"].get<std::string>(), at));
      pre_tokenizer.splits_.push_back(std::move(split));
    } else if (type == "Digits") {  // tokenizers' char::is_numeric is \p{N}
      KELVIN_ASSIGN_OR_RETURN(const bool individual,
                              OptionalBool(*step, at, "individual_digits", false));
      KELVIN_ASSIGN_OR_RETURN(SplitRegex split,
                              SplitRegex::Compile(individual ? R"(\p{N})" : R"(\p{N}+)", at));
      pre_tokenizer.splits_.push_back(std::move(split));
    } else if (type == "ByteLevel" && i + 1 == steps.size()) {
      KELVIN_RETURN_IF_ERROR(RequireAbsentOr(*step, at, "add_prefix_space", false));
      const auto use_regex = step->find("use_regex");
      if (use_regex == step->end() || use_regex->is_null() || *use_regex == true) {
        KELVIN_ASSIGN_OR_RETURN(SplitRegex split, SplitRegex::Compile(kGpt2SplitPattern, at));
        pre_tokenizer.splits_.push_back(std::move(split));
      }
      pre_tokenizer.byte_level_ = true;
    } else if (type == "ByteLevel") {
      return Unsupported(at + " (a ByteLevel step before another step)", *step);
    } else if (type == "Metaspace" && steps.size() == 1) {
      KELVIN_ASSIGN_OR_RETURN(pre_tokenizer.metaspace_, ParseMetaspace(*step, at));
    } else if (type == "Metaspace") {
      return Unsupported(at + " (Metaspace with other steps)", *step);
    } else {
      return Unsupported(at + ".type", Field(*step, "type"));
    }
  }
  return pre_tokenizer;
}

absl::Status PreTokenizer::Split(std::string_view text, bool at_text_start, std::string& storage,
                                 std::vector<std::string_view>& pieces) const {
  if (metaspace_.has_value()) {
    const Metaspace& m = *metaspace_;
    storage = ReplaceAll(text, " ", m.replacement);
    const bool prepend = !storage.empty() && !storage.starts_with(m.replacement) &&
                         (m.prepend == Metaspace::Prepend::kAlways ||
                          (m.prepend == Metaspace::Prepend::kFirst && at_text_start));
    if (prepend) storage.insert(0, m.replacement);
    const std::string_view rewritten = storage;
    if (!m.split) {
      if (!rewritten.empty()) pieces.push_back(rewritten);
      return absl::OkStatus();
    }
    size_t begin = 0;  // each replacement character starts a piece
    for (size_t at = rewritten.find(m.replacement, 1); at != rewritten.npos;
         at = rewritten.find(m.replacement, at + m.replacement.size())) {
      pieces.push_back(rewritten.substr(begin, at - begin));
      begin = at;
    }
    if (begin < rewritten.size()) pieces.push_back(rewritten.substr(begin));
    return absl::OkStatus();
  }
  const size_t first = pieces.size();
  if (!text.empty()) pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const SplitRegex& split : splits_) {
    next.clear();
    for (size_t i = first; i < pieces.size(); ++i) {
      KELVIN_RETURN_IF_ERROR(split.Split(pieces[i], next));
    }
    pieces.resize(first);
    pieces.insert(pieces.end(), next.begin(), next.end());
  }
  return absl::OkStatus();
}

}  // namespace kelvin::data
