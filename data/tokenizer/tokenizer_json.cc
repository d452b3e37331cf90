// Messages for tokenizer.json's parts.
#include "data/tokenizer/tokenizer_json.h"

#include "absl/strings/str_cat.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {

using nlohmann::json;

namespace {

std::string Shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

}  // namespace

const json& Field(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string JsonType(const json& part) {
  if (!part.is_object()) return "";
  const auto it = part.find("type");
  return it != part.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::Status Unsupported(const std::string& where, const json& value) {
  return absl::InvalidArgumentError(absl::StrCat(
      where, " is ", Shown(value), ", which is not supported (", kTokenizerFamilies, ")"));
}

absl::Status WrongType(const std::string& where, const char* expected, const json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, " is ", Shown(value), ", expected ", expected));
}

absl::Status RequireAbsentOr(const json& object, const std::string& where, const char* key,
                             const json& allowed) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null() || *it == allowed) return absl::OkStatus();
  return Unsupported(absl::StrCat(where, ".", key), *it);
}

absl::StatusOr<bool> OptionalBool(const json& object, const std::string& where, const char* key,
                                  bool fallback) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return WrongType(absl::StrCat(where, ".", key), "true or false", *it);
  return it->get<bool>();
}

absl::StatusOr<std::string> OneCharacter(const json& object, const std::string& where,
                                         const char* key) {
  const json& value = Field(object, key);
  if (!value.is_string() || value.get<std::string>().empty() ||
      FirstInvalidUtf8(value.get<std::string>()).has_value() ||
      Utf8Length(static_cast<uint8_t>(value.get<std::string>()[0])) !=
          value.get<std::string>().size()) {
    return WrongType(absl::StrCat(where, ".", key), "one character", value);
  }
  return value.get<std::string>();
}

absl::StatusOr<std::vector<std::pair<const json*, std::string>>> SequenceSteps(
    const json& value, const std::string& where, const char* list_key) {
  std::vector<std::pair<const json*, std::string>> steps;
  if (JsonType(value) != "Sequence") {
    steps.emplace_back(&value, where);
    return steps;
  }
  const auto list = value.find(list_key);
  if (list == value.end() || !list->is_array()) {
    return WrongType(absl::StrCat(where, ".", list_key), "an array", Field(value, list_key));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    steps.emplace_back(&(*list)[i], absl::StrCat(where, ".", list_key, "[", i, "]"));
  }
  return steps;
}

}  // namespace kelvin::data
