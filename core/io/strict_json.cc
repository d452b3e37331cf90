// Strict JSON parsing: a SAX pass that finds duplicate keys and the first syntax error with its
// position, then nlohmann's DOM parse (see strict_json.h).
#include "core/io/strict_json.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kelvin::io {
namespace {

using Json = nlohmann::json;

// 1-based line and column of byte `offset` of `text`.
std::pair<size_t, size_t> LineAndColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
  const size_t line_start = before.rfind('\n');
  return {line, line_start == std::string_view::npos ? offset + 1 : offset - line_start};
}

// Keys of the objects enclosing the parse position; the first duplicate or syntax error.
class DuplicateKeyFinder final : public Json::json_sax_t {
 public:
  DuplicateKeyFinder(std::string_view text, std::string_view top_level_key_kind)
      : text_(text), top_level_key_kind_(top_level_key_kind) {}

  std::string error;  // "" until a duplicate or a syntax error

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(); }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return Open(); }  // no keys; one nesting stack
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool key(string_t& name) override {
    OpenContainer& object = open_.back();
    object.last_key = name;
    if (object.keys.insert(name).second) return true;
    if (open_.size() == 1) {
      error = absl::StrCat(std::string(top_level_key_kind_), " \"", name, "\" appears twice");
    } else {
      std::vector<std::string> enclosing;
      for (size_t i = 0; i + 1 < open_.size(); ++i) {
        if (!open_[i].last_key.empty()) enclosing.push_back(open_[i].last_key);
      }
      error = absl::StrCat("key \"", name, "\" appears twice in \"",
                           absl::StrJoin(enclosing, "\" > \""), "\"");
    }
    return false;
  }
  // nlohmann's what(): "[json.exception.parse_error.101] parse error at line 1, column 5: syntax
  // error while parsing value - invalid literal; last read: 'N'" or "[json.exception.
  // out_of_range.406] number overflow parsing '1e400'": the part after the bracket, with the
  // position computed here (the out_of_range errors carry none).
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& exception) override {
    std::string_view what = exception.what();
    what.remove_prefix(std::min(what.find(']') + 2, what.size()));
    if (const size_t colon = what.find(": "); what.starts_with("parse error at line")) {
      what.remove_prefix(std::min(colon + 2, what.size()));  // the position is given below
    }
    const auto [line, column] = LineAndColumn(text_, position == 0 ? 0 : position - 1);
    error = absl::StrCat("not well-formed JSON at line ", line, ", column ", column, " (",
                         std::string(what), ")");
    return false;
  }

 private:
  // Kelvin's files nest a few levels; a deep one is not one of them (and would recurse deeply
  // when printed or destroyed).
  static constexpr size_t kMaxDepth = 64;

  bool Open() {
    if (open_.size() == kMaxDepth) {
      error = absl::StrCat("nested deeper than ", kMaxDepth, " levels: not the file expected");
      return false;
    }
    open_.emplace_back();
    return true;
  }

  struct OpenContainer {
    std::unordered_set<std::string> keys;
    std::string last_key;
  };
  std::string_view text_;
  std::string_view top_level_key_kind_;
  std::vector<OpenContainer> open_;
};

}  // namespace

absl::StatusOr<Json> ParseStrictJson(std::string_view text, std::string_view where,
                                     std::string_view top_level_key_kind) {
  // nlohmann ends its input at a NUL byte, so what follows one would be dropped unread.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    const auto [line, column] = LineAndColumn(text, nul);
    return absl::InvalidArgumentError(absl::StrCat(std::string(where),
                                                   ": not well-formed JSON at line ", line,
                                                   ", column ", column, " (a NUL byte)"));
  }
  DuplicateKeyFinder finder(text, top_level_key_kind);
  if (!Json::sax_parse(text.begin(), text.end(), &finder) || !finder.error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": ", finder.error));
  }
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace kelvin::io
