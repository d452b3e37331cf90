// The decoder steps, each over the list of token strings as tokenizers' decode_chain.
#include "data/tokenizer/decoder.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/tokenizer_json.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

constexpr char kReplacementCharacter[] = "\xEF\xBF\xBD";  // U+FFFD

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xNN>" token as tokenizers reads it (Rust's u8::from_str_radix of NN, which
// also takes "+N"), or -1.
int FallbackByte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  if (token[3] == '+') return HexDigit(token[4]);
  const int high = HexDigit(token[3]), low = HexDigit(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

// The characters of valid UTF-8 `text`, each as its bytes.
std::vector<std::string_view> Characters(std::string_view text) {
  std::vector<std::string_view> characters;
  for (size_t i = 0, length = 0; i < text.size(); i += length) {
    length = std::min(Utf8Length(static_cast<uint8_t>(text[i])), text.size() - i);
    characters.push_back(text.substr(i, length));
  }
  return characters;
}

}  // namespace

absl::StatusOr<TokenDecoder::Step> TokenDecoder::ParseStep(const json& step,
                                                           const std::string& where) {
  const std::string type = JsonType(step);
  Step parsed;
  if (type == "ByteLevel") {
    parsed.kind = Step::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    parsed.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    parsed.kind = Step::Kind::kFuse;
  } else if (type == "Replace") {
    const json pattern = Field(step, "pattern");
    if (!pattern.is_object() || pattern.size() != 1 || !pattern.contains("String") ||
        !pattern["String"].is_string() || pattern["String"].get<std::string>().empty() ||
        !step.contains("content") || !step["content"].is_string()) {
      return Unsupported(where, step);
    }
    parsed.kind = Step::Kind::kReplace;
    parsed.pattern = pattern["String"];
    parsed.replacement = step["content"];
  } else if (type == "Strip") {
    parsed.kind = Step::Kind::kStrip;
    KELVIN_ASSIGN_OR_RETURN(parsed.pattern, OneCharacter(step, where, "content"));
    for (auto [key, value] : {std::pair{"start", &parsed.start}, std::pair{"stop", &parsed.stop}}) {
      const json count = Field(step, key);
      if (!count.is_number_unsigned() || count.get<uint64_t>() > (1u << 20)) {
        return WrongType(absl::StrCat(where, ".", key), "a count of characters", count);
      }
      *value = count.get<size_t>();
    }
  } else if (type == "Metaspace") {
    parsed.kind = Step::Kind::kMetaspace;
    KELVIN_ASSIGN_OR_RETURN(parsed.pattern, OneCharacter(step, where, "replacement"));
    const json scheme = Field(step, "prepend_scheme");
    if (scheme.is_null()) {  // files from tokenizers < 0.15 say add_prefix_space instead
      KELVIN_ASSIGN_OR_RETURN(parsed.strip_first_token,
                              OptionalBool(step, where, "add_prefix_space", true));
    } else if (scheme == "first" || scheme == "always" || scheme == "never") {
      parsed.strip_first_token = scheme != "never";
    } else {
      return Unsupported(where + ".prepend_scheme", scheme);
    }
  } else {
    return Unsupported(where, step);
  }
  return parsed;
}

absl::StatusOr<TokenDecoder> TokenDecoder::Parse(const json& value, const std::string& where) {
  TokenDecoder decoder;
  if (value.is_null()) {
    decoder.join_with_spaces_ = true;
    return decoder;
  }
  KELVIN_ASSIGN_OR_RETURN(const auto steps, SequenceSteps(value, where, "decoders"));
  for (const auto& [part, at] : steps) {
    KELVIN_ASSIGN_OR_RETURN(Step step, ParseStep(*part, at));
    decoder.steps_.push_back(std::move(step));
  }
  return decoder;
}

bool TokenDecoder::byte_level() const {
  return std::any_of(steps_.begin(), steps_.end(),
                     [](const Step& step) { return step.kind == Step::Kind::kByteLevel; });
}

std::string TokenDecoder::Decode(std::vector<std::string> tokens) const {
  if (join_with_spaces_) return absl::StrJoin(tokens, " ");
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kByteLevel: {  // one token of all the bytes
        std::string bytes;
        for (const std::string& token : tokens) {
          const std::optional<std::string> spelled = BytesOfByteLevelChars(token);
          bytes += spelled.has_value() ? *spelled : token;
        }
        tokens.assign(1, std::move(bytes));
        break;
      }
      case Step::Kind::kReplace:
        for (std::string& token : tokens) token = ReplaceAll(token, step.pattern, step.replacement);
        break;
      case Step::Kind::kByteFallback: {
        next.clear();
        std::string run;  // the bytes of consecutive <0xNN> tokens
        size_t run_tokens = 0;
        const auto flush = [&] {
          if (run_tokens == 0) return;
          if (!FirstInvalidUtf8(run).has_value()) {
            next.push_back(run);
          } else {
            for (size_t i = 0; i < run_tokens; ++i) next.push_back(kReplacementCharacter);
          }
          run.clear();
          run_tokens = 0;
        };
        for (std::string& token : tokens) {
          const int byte = FallbackByte(token);
          if (byte >= 0) {
            run.push_back(static_cast<char>(byte));
            ++run_tokens;
          } else {
            flush();
            next.push_back(std::move(token));
          }
        }
        flush();
        tokens.swap(next);
        break;
      }
      case Step::Kind::kFuse:
        tokens.assign(1, absl::StrJoin(tokens, ""));
        break;
      case Step::Kind::kStrip:
        for (std::string& token : tokens) {
          std::vector<std::string_view> characters = Characters(token);
          size_t begin = 0, end = characters.size();
          while (begin < std::min(step.start, end) && characters[begin] == step.pattern) ++begin;
          for (size_t i = 0; i < step.stop && end > begin && characters[end - 1] == step.pattern;
               ++i) {
            --end;
          }
          std::string kept;
          for (size_t i = begin; i < end; ++i) kept.append(characters[i]);
          token = std::move(kept);
        }
        break;
      case Step::Kind::kMetaspace:
        for (size_t t = 0; t < tokens.size(); ++t) {
          tokens[t] =
              ReplaceAll(tokens[t], step.pattern, t == 0 && step.strip_first_token ? "" : " ");
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

}  // namespace kelvin::data
