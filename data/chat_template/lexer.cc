// Template source into tokens (see lexer.h).
#include "data/chat_template/lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/chat_template/text.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::chat_template {
namespace {

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(LexedTemplate& lexed) : lexed_(lexed), src_(lexed.source) {}

  absl::Status Run() {
    size_t pos = 0;
    bool line_starting = true;  // the text ahead starts a line (lstrip_blocks looks at it)
    while (pos < src_.size()) {
      const size_t tag = FindTag(pos);
      std::string_view text = std::string_view(src_).substr(pos, tag - pos);
      if (tag == src_.size()) {
        Emit(Token::Kind::kText, std::string(text), pos);
        break;
      }
      const char kind = src_[tag + 1];
      const char marker = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (marker == '-') {
        text = StripPythonSpace(text, /*front=*/false, /*back=*/true);
      } else if (kind != '{' && marker != '+') {  // lstrip_blocks
        const size_t newline = text.rfind('\n');
        const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
        if ((line_start > 0 || line_starting) && line_start < text.size() &&
            StripPythonSpace(text.substr(line_start), true, false).empty()) {
          text = text.substr(0, line_start);
        }
      }
      if (!text.empty()) Emit(Token::Kind::kText, std::string(text), pos);
      const size_t body = tag + 2 + (marker == '-' || marker == '+' ? 1 : 0);
      size_t end;
      if (kind == '#') {
        const size_t close = src_.find("#}", body);
        if (close == std::string::npos) {
          return Error(tag, "a comment {# is never closed by #}");
        }
        const char before = close > body ? src_[close - 1] : '\0';
        end = AfterTagEnd(close + 2, before == '-', /*trim_newline=*/before != '+');
      } else {
        Emit(kind == '{' ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "", tag);
        KELVIN_ASSIGN_OR_RETURN(end, LexExpression(body, tag, kind == '%'));
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    Emit(Token::Kind::kEnd, "", src_.size());
    return absl::OkStatus();
  }

 private:
  size_t FindTag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // Where the text after a tag's end at `pos` starts: all whitespace skipped after `-`, else the
  // one newline trim_blocks drops (block tags and comments).
  size_t AfterTagEnd(size_t pos, bool strip_all, bool trim_newline) const {
    if (strip_all) {
      while (pos < src_.size()) {
        const size_t n = PythonSpaceAt(src_, pos);
        if (n == 0) break;
        pos += n;
      }
    } else if (trim_newline && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  // The tokens of a {{ }} or {% %} tag's body from `pos`; returns where the text after it starts.
  absl::StatusOr<size_t> LexExpression(size_t pos, size_t tag, bool block) {
    std::vector<char> brackets;  // open ( [ {: a }} inside a dict literal does not end the tag
    const std::string close = block ? "%}" : "}}";
    while (true) {
      while (pos < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos]))) ++pos;
      if (pos >= src_.size()) {
        return Error(tag,
                     absl::StrCat("this ", block ? "{%" : "{{", " is never closed by ", close));
      }
      const std::string_view rest = std::string_view(src_).substr(pos);
      if (brackets.empty()) {
        const bool minus = rest.starts_with("-") && rest.substr(1).starts_with(close);
        const bool plus = block && rest.starts_with("+") && rest.substr(1).starts_with(close);
        if (minus || plus || rest.starts_with(close)) {
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", pos);
          const size_t after = pos + close.size() + (minus || plus ? 1 : 0);
          return AfterTagEnd(after, minus, /*trim_newline=*/block && !plus);
        }
      }
      const char c = src_[pos];
      if (c == '\'' || c == '"') {
        KELVIN_ASSIGN_OR_RETURN(pos, LexString(pos));
      } else if (std::isdigit(static_cast<unsigned char>(c)) &&
                 (pos == 0 || src_[pos - 1] != '.')) {
        pos = LexNumber(pos);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
          ++end;
        }
        Emit(Token::Kind::kName, src_.substr(pos, end - pos), pos);
        pos = end;
      } else {
        static constexpr std::string_view kTwoCharacter[] = {"//", "**", "==", "!=", "<=", ">="};
        const auto two = std::find_if(std::begin(kTwoCharacter), std::end(kTwoCharacter),
                                      [&](std::string_view op) { return rest.starts_with(op); });
        if (two != std::end(kTwoCharacter)) {
          Emit(Token::Kind::kOperator, std::string(*two), pos);
          pos += 2;
          continue;
        }
        if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
          return Error(pos, absl::StrCat("unexpected character '", std::string(1, c),
                                         "' in a template expression"));
        }
        if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
        if (c == ')' || c == ']' || c == '}') {
          const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) {
            return Error(pos, absl::StrCat("unbalanced '", std::string(1, c), "'"));
          }
          brackets.pop_back();
        }
        Emit(Token::Kind::kOperator, std::string(1, c), pos);
        ++pos;
      }
    }
  }

  absl::StatusOr<size_t> LexString(size_t start) {
    const char quote = src_[start];
    std::string value;
    size_t pos = start + 1;
    for (; pos < src_.size() && src_[pos] != quote; ++pos) {
      if (src_[pos] != '\\') {
        value += src_[pos];
        continue;
      }
      if (++pos >= src_.size()) break;
      const char e = src_[pos];
      const auto hex = [&](size_t digits) -> absl::StatusOr<uint32_t> {
        uint32_t code = 0;
        for (size_t i = 1; i <= digits; ++i) {
          if (pos + i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos + i]))) {
            return Error(pos - 1, absl::StrCat("a \\", std::string(1, e), " escape needs ", digits,
                                               " hexadecimal digits"));
          }
          const char d = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos + i])));
          code = code * 16 + static_cast<uint32_t>(d <= '9' ? d - '0' : d - 'a' + 10);
        }
        pos += digits;
        return code;
      };
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          KELVIN_ASSIGN_OR_RETURN(const uint32_t code, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
          if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
            return Error(start, "a string escape names no Unicode character");
          }
          data::AppendUtf8(code, value);
          break;
        }
        default:  // Python keeps an unknown escape as written
          value += '\\';
          value += e;
      }
    }
    if (pos >= src_.size()) return Error(start, "a string literal is never closed");
    Emit(Token::Kind::kString, std::move(value), start);
    return pos + 1;
  }

  size_t LexNumber(size_t start) {
    const auto digits = [&](size_t pos) {
      while (pos < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos])) ||
                                   (src_[pos] == '_' && pos + 1 < src_.size() &&
                                    std::isdigit(static_cast<unsigned char>(src_[pos + 1]))))) {
        ++pos;
      }
      return pos;
    };
    size_t pos = digits(start);
    bool is_float = false;
    if (pos + 1 < src_.size() && src_[pos] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos + 1]))) {
      pos = digits(pos + 1);
      is_float = true;
    }
    if (pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
      size_t exponent = pos + 1;
      if (exponent < src_.size() && (src_[exponent] == '+' || src_[exponent] == '-')) ++exponent;
      if (exponent < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exponent]))) {
        pos = digits(exponent);
        is_float = true;
      }
    }
    std::string text = src_.substr(start, pos - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInteger, std::move(text), start);
    return pos;
  }

  void Emit(Token::Kind kind, std::string text, size_t offset) {
    lexed_.tokens.push_back({kind, std::move(text), offset});
  }

  absl::Status Error(size_t offset, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(lexed_.Where(offset), ": ", what));
  }

  LexedTemplate& lexed_;
  const std::string& src_;
};

}  // namespace

std::string LexedTemplate::Where(size_t offset) const {
  offset = std::min(offset, source.size());
  const size_t line = 1 + static_cast<size_t>(std::count(
                              source.begin(), source.begin() + static_cast<long>(offset), '\n'));
  const size_t newline = source.rfind('\n', offset == 0 ? 0 : offset - 1);
  const size_t column = newline == std::string::npos || offset == 0 ? offset + 1 : offset - newline;
  return absl::StrCat("line ", line, ", column ", column);
}

absl::StatusOr<LexedTemplate> Lex(std::string_view source) {
  LexedTemplate lexed;
  lexed.source = NormalizeNewlines(source);
  // Text that is not UTF-8 would otherwise pass into every rendering and be blamed on the samples.
  if (const std::optional<size_t> bad = data::FirstInvalidUtf8(lexed.source); bad.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the byte 0x%02X is not UTF-8: a chat template is UTF-8 text (save it as UTF-8)",
        lexed.Where(*bad), static_cast<uint8_t>(lexed.source[*bad])));
  }
  Lexer lexer(lexed);
  KELVIN_RETURN_IF_ERROR(lexer.Run());
  return lexed;
}

}  // namespace kelvin::chat_template
