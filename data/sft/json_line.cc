// A JSON Lines line's shape and text fields (see json_line.h).
#include "data/sft/json_line.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kelvin::data {
namespace {

// The column (1-based) where `text` first opens a container deeper than kMaxLineDepth, or 0.
size_t TooDeepAt(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxLineDepth) return i + 1;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return 0;
}

}  // namespace

absl::Status CheckJsonLineShape(std::string_view text) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column ", nul + 1,
        " is a NUL byte: a JSON Lines file is UTF-8 text (is the file damaged, or not JSON "
        "Lines?)"));
  }
  if (const size_t column = TooDeepAt(text); column > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column ", column, " opens an array or object nested more than ", kMaxLineDepth,
        " levels deep: a sample is a shallow JSON object (is the line damaged?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> TextField(const nlohmann::json& object, const char* key,
                                           const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat("no \"", key, "\" in ", field));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" of ", field, " is ",
                                                   it->dump().substr(0, 80), ", not a string"));
  }
  const std::string& text = it->get_ref<const std::string&>();
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" of ", field, " is empty"));
  }
  return std::string_view(text);
}

}  // namespace kelvin::data
