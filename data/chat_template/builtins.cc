// Filters, tests and methods (see builtins.h).
#include "data/chat_template/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/chat_template/text.h"

namespace kelvin::chat_template {
namespace {

using Kind = Value::Kind;

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The argument at `index` or named `name`, or null when not given.
const Value* Argument(const CallArgs& args, size_t index, const std::string& name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& [key, value] : args.named) {
    if (key == name) return &value;
  }
  return nullptr;
}

absl::Status CheckArguments(const std::string& what, const CallArgs& args, size_t max_positional,
                            std::initializer_list<std::string_view> names) {
  if (args.positional.size() > max_positional) {
    return Invalid(absl::StrCat(what, " takes at most ", max_positional, " positional argument",
                                max_positional == 1 ? "" : "s", ", got ", args.positional.size()));
  }
  for (const auto& [key, value] : args.named) {
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      return Invalid(absl::StrCat(what, " has no argument named '", key, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> StringArgument(const std::string& what, const Value* value) {
  if (value == nullptr || !value->is_string()) {
    return Invalid(absl::StrCat(what, " needs a string argument",
                                value ? absl::StrCat(", got ", value->TypeName()) : ""));
  }
  return value->str();
}

absl::StatusOr<std::string> AsciiCase(const std::string& what, std::string_view text,
                                      const std::function<char(char, size_t)>& map) {
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<unsigned char>(out[i]) >= 0x80) {
      return Invalid(absl::StrCat(what,
                                  " of text with non-ASCII characters is not supported "
                                  "(Kelvin changes the case of ASCII letters only)"));
    }
    out[i] = map(out[i], i);
  }
  return out;
}

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char Upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

absl::StatusOr<std::string> Title(std::string_view text) {
  bool previous_letter = false;
  return AsciiCase("title", text, [&](char c, size_t) {
    const char mapped = previous_letter ? Lower(c) : Upper(c);
    previous_letter = IsAsciiLetter(c);
    return mapped;
  });
}

absl::StatusOr<std::string> Capitalize(std::string_view text) {
  return AsciiCase("capitalize", text,
                   [](char c, size_t i) { return i == 0 ? Upper(c) : Lower(c); });
}

absl::StatusOr<int64_t> Length(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(CodePointOffsets(value.str()).size() - 1);
    case Kind::kList:
      return static_cast<int64_t>(value.list().size());
    case Kind::kDict:
      return static_cast<int64_t>(value.dict().items.size());
    default:
      return Invalid(absl::StrCat("object of type '", value.TypeName(), "' has no len()"));
  }
}

// The items a for loop, join, map, select, ... go through.
absl::StatusOr<List> Iterate(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined:
      return List{};
    case Kind::kList:
      return value.list();
    case Kind::kDict: {
      List keys;
      for (const auto& [key, item] : value.dict().items) keys.push_back(Value::String(key));
      return keys;
    }
    case Kind::kString: {
      const std::vector<size_t> offsets = CodePointOffsets(value.str());
      List characters;
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        characters.push_back(
            Value::String(value.str().substr(offsets[i], offsets[i + 1] - offsets[i])));
      }
      return characters;
    }
    default:
      return Invalid(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

// `value`.attribute as the filters map/selectattr read it (a dotted path: "function.name").
Value AttributeOf(const Value& value, std::string_view path) {
  Value current = value;
  while (true) {
    const size_t dot = path.find('.');
    const std::string name(path.substr(0, dot));
    if (!current.is_dict()) return Value::Undefined(std::string(name));
    const Value* found = current.dict().Find(name);
    if (found == nullptr) return Value::Undefined(std::string(name));
    current = *found;
    if (dot == std::string_view::npos) return current;
    path.remove_prefix(dot + 1);
  }
}

absl::StatusOr<Value> ToJsonFilter(const Value& input, const CallArgs& args, WorkBudget& budget) {
  KELVIN_RETURN_IF_ERROR(
      CheckArguments("tojson", args, 1, {"indent", "sort_keys", "separators", "ensure_ascii"}));
  int indent = -1;
  if (const Value* value = Argument(args, 0, "indent"); value != nullptr && !value->is_none()) {
    if (value->kind() != Kind::kInt || value->as_int() < 0 || value->as_int() > 64) {
      return Invalid("tojson: indent is a whole number of spaces from 0 to 64");
    }
    indent = static_cast<int>(value->as_int());
  }
  const Value* sort_keys = Argument(args, 99, "sort_keys");
  std::string item_separator = indent >= 0 ? "," : ", ", key_separator = ": ";
  if (const Value* value = Argument(args, 99, "separators");
      value != nullptr && !value->is_none()) {
    if (!value->is_list() || value->list().size() != 2 || !value->list()[0].is_string() ||
        !value->list()[1].is_string()) {
      return Invalid("tojson: separators is a pair of strings (item, key)");
    }
    item_separator = value->list()[0].str();
    key_separator = value->list()[1].str();
  }
  if (const Value* value = Argument(args, 99, "ensure_ascii");
      value != nullptr && value->Truthy()) {
    return Invalid(
        "tojson(ensure_ascii=true) is not supported: Kelvin writes UTF-8 as "
        "transformers' default (ensure_ascii=False) does");
  }
  KELVIN_ASSIGN_OR_RETURN(std::string json,
                          ToJson(input, indent, sort_keys != nullptr && sort_keys->Truthy(),
                                 item_separator, key_separator));
  KELVIN_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(json.size())));
  return Value::String(std::move(json));
}

absl::StatusOr<Value> Replace(const Value& input, const Value* old_value, const Value* new_value,
                              const Value* count, WorkBudget& budget) {
  const std::string text = input.ToString();
  KELVIN_ASSIGN_OR_RETURN(const std::string old_text, StringArgument("replace", old_value));
  KELVIN_ASSIGN_OR_RETURN(const std::string new_text, StringArgument("replace", new_value));
  int64_t left = count != nullptr && !count->is_none() ? count->as_int() : -1;
  std::string out;
  size_t pos = 0;
  if (old_text.empty()) {
    return Invalid("replace with an empty old string is not supported");
  }
  while (left != 0) {
    const size_t found = text.find(old_text, pos);
    if (found == std::string::npos) break;
    out.append(text, pos, found - pos);
    out += new_text;
    KELVIN_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(found - pos + new_text.size())));
    pos = found + old_text.size();
    if (left > 0) --left;
  }
  out.append(text, pos);
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Strip(const std::string& what, const Value& input, const Value* chars,
                            bool front, bool back) {
  const std::string text = input.ToString();
  if (chars == nullptr || chars->is_none()) {
    return Value::String(std::string(StripPythonSpace(text, front, back)));
  }
  KELVIN_ASSIGN_OR_RETURN(const std::string set, StringArgument(what, chars));
  return Value::String(std::string(StripCharacters(text, set, front, back)));
}

absl::StatusOr<Value> Split(const std::string& text, const Value* separator, const Value* limit,
                            WorkBudget& budget) {
  int64_t splits = limit != nullptr && limit->kind() == Kind::kInt ? limit->as_int() : -1;
  List parts;
  KELVIN_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(text.size())));
  if (separator == nullptr || separator->is_none()) {  // runs of whitespace, no empty parts
    size_t pos = 0;
    while (true) {
      while (pos < text.size() && PythonSpaceAt(text, pos) > 0) pos += PythonSpaceAt(text, pos);
      if (pos >= text.size()) break;
      if (splits == 0) {
        parts.push_back(
            Value::String(std::string(StripPythonSpace(text.substr(pos), false, true))));
        break;
      }
      size_t end = pos;
      while (end < text.size() && PythonSpaceAt(text, end) == 0) ++end;
      parts.push_back(Value::String(text.substr(pos, end - pos)));
      pos = end;
      if (splits > 0) --splits;
    }
    return Value::FromList(std::move(parts));
  }
  KELVIN_ASSIGN_OR_RETURN(const std::string sep, StringArgument("split", separator));
  if (sep.empty()) return Invalid("split: empty separator");
  size_t pos = 0;
  while (splits != 0) {
    const size_t found = text.find(sep, pos);
    if (found == std::string::npos) break;
    parts.push_back(Value::String(text.substr(pos, found - pos)));
    pos = found + sep.size();
    if (splits > 0) --splits;
  }
  parts.push_back(Value::String(text.substr(pos)));
  return Value::FromList(std::move(parts));
}

// str.startswith / endswith with a string or a list (tuple) of strings.
absl::StatusOr<Value> AffixTest(const std::string& what, const std::string& text,
                                const Value* affix, bool prefix) {
  List candidates;
  if (affix != nullptr && affix->is_list()) {
    candidates = affix->list();
  } else if (affix != nullptr) {
    candidates.push_back(*affix);
  }
  if (candidates.empty()) return Invalid(absl::StrCat(what, " needs a string argument"));
  for (const Value& candidate : candidates) {
    KELVIN_ASSIGN_OR_RETURN(const std::string piece, StringArgument(what, &candidate));
    if (prefix ? std::string_view(text).starts_with(piece)
               : std::string_view(text).ends_with(piece)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

// The whole part of a finite `value` (Python's int(float)), or an error where Python's integer
// would not fit the 64-bit ones Kelvin computes with (jinja2 renders it; Kelvin will not render
// another number).
absl::StatusOr<Value> WholePart(double value) {
  const double whole = std::trunc(value);
  if (whole < -0x1p63 || whole >= 0x1p63) {
    return Invalid(absl::StrCat("int: ", value,
                                " is beyond the 64-bit integers Kelvin's templates compute with"));
  }
  return Value::Int(static_cast<int64_t>(whole));
}

absl::StatusOr<Value> ToNumber(const Value& input, const Value* fallback, bool to_int) {
  const Value default_value = fallback ? *fallback : to_int ? Value::Int(0) : Value::Float(0);
  switch (input.kind()) {
    case Kind::kBool:
    case Kind::kInt:
      return to_int ? Value::Int(input.as_int()) : Value::Float(input.as_double());
    case Kind::kFloat: {
      const double value = input.as_double();
      if (!to_int) return input;
      if (std::isnan(value)) return default_value;  // jinja2: int() raises ValueError, caught
      if (std::isinf(value)) return Invalid("int: cannot convert float infinity to integer");
      return WholePart(value);
    }
    case Kind::kString: {
      const std::string text(StripPythonSpace(input.str(), true, true));
      if (text.empty()) return default_value;
      char* end = nullptr;
      errno = 0;
      if (to_int) {
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (*end == '\0' && errno == 0) return Value::Int(value);
      }
      const double value = std::strtod(text.c_str(), &end);  // inf when beyond a double
      if (*end != '\0') return default_value;
      if (!to_int) return Value::Float(value);
      // jinja2 gives the default for "inf" and "nan" (int(float(...)) fails and is caught).
      if (!std::isfinite(value)) return default_value;
      return WholePart(value);
    }
    default:
      return default_value;
  }
}

absl::StatusOr<Value> Round(const Value& input, const CallArgs& args) {
  if (!input.is_number() && input.kind() != Kind::kBool) {
    return Invalid(absl::StrCat("round of a ", input.TypeName()));
  }
  const Value* precision = Argument(args, 0, "precision");
  const Value* method = Argument(args, 1, "method");
  const int64_t digits = precision ? precision->as_int() : 0;
  if (digits < 0 || digits > 15) return Invalid("round: precision is from 0 to 15");
  const std::string how = method && method->is_string() ? method->str() : "common";
  const double scale = std::pow(10.0, static_cast<double>(digits));
  const double scaled = input.as_double() * scale;
  double rounded;
  if (how == "common") {
    rounded = std::nearbyint(scaled);  // Python's round(): half to even
  } else if (how == "ceil") {
    rounded = std::ceil(scaled);
  } else if (how == "floor") {
    rounded = std::floor(scaled);
  } else {
    return Invalid("round: method is common, ceil or floor");
  }
  return Value::Float(rounded / scale);
}

// select / reject / selectattr / rejectattr: the items for which the test (or truthiness) holds.
absl::StatusOr<Value> Select(const std::string& name, const Value& input, const CallArgs& args) {
  const bool by_attribute = name.ends_with("attr");
  const bool keep = name.starts_with("select");
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    KELVIN_ASSIGN_OR_RETURN(attribute, StringArgument(name, Argument(args, next++, "")));
  }
  std::string test;
  if (next < args.positional.size()) {
    KELVIN_ASSIGN_OR_RETURN(test, StringArgument(name, &args.positional[next++]));
    if (!IsTest(test)) return Invalid(absl::StrCat(name, ": no test named '", test, "'"));
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<long>(next),
                              args.positional.end());
  KELVIN_ASSIGN_OR_RETURN(const List items, Iterate(input));
  List kept;
  for (const Value& item : items) {
    const Value subject = by_attribute ? AttributeOf(item, attribute) : item;
    bool holds = subject.Truthy();
    if (!test.empty()) {
      KELVIN_ASSIGN_OR_RETURN(holds, ApplyTest(test, subject, test_args));
    }
    if (holds == keep) kept.push_back(item);
  }
  return Value::FromList(std::move(kept));
}

absl::StatusOr<Value> Map(const Value& input, const CallArgs& args, WorkBudget& budget) {
  KELVIN_ASSIGN_OR_RETURN(const List items, Iterate(input));
  List mapped;
  if (const Value* attribute = Argument(args, 99, "attribute"); attribute != nullptr) {
    KELVIN_ASSIGN_OR_RETURN(const std::string path, StringArgument("map", attribute));
    const Value* fallback = Argument(args, 99, "default");
    for (const Value& item : items) {
      Value value = AttributeOf(item, path);
      mapped.push_back(value.is_undefined() && fallback ? *fallback : value);
    }
    return Value::FromList(std::move(mapped));
  }
  KELVIN_ASSIGN_OR_RETURN(const std::string filter, StringArgument("map", Argument(args, 0, "")));
  if (!IsFilter(filter) || filter == "map") {
    return Invalid(absl::StrCat("map: no filter named '", filter, "'"));
  }
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.named = args.named;
  for (const Value& item : items) {
    KELVIN_ASSIGN_OR_RETURN(Value value, ApplyFilter(filter, item, filter_args, budget));
    mapped.push_back(std::move(value));
  }
  return Value::FromList(std::move(mapped));
}

absl::StatusOr<Value> Join(const Value& input, const CallArgs& args, WorkBudget& budget) {
  const Value* separator = Argument(args, 0, "d");
  const Value* attribute = Argument(args, 1, "attribute");
  const std::string sep = separator ? separator->ToString() : "";
  KELVIN_ASSIGN_OR_RETURN(const List items, Iterate(input));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value item = attribute ? AttributeOf(items[i], attribute->ToString()) : items[i];
    const std::string piece = item.ToString();
    KELVIN_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(piece.size() + sep.size())));
    if (i > 0) out += sep;
    out += piece;
  }
  return Value::String(std::move(out));
}

Value FirstOrLast(const Value& input, bool first) {
  if (input.is_list()) {
    if (input.list().empty()) return Value::Undefined("the first item of an empty list");
    return first ? input.list().front() : input.list().back();
  }
  if (input.is_string()) {
    const std::vector<size_t> offsets = CodePointOffsets(input.str());
    if (offsets.size() == 1) return Value::Undefined("the first character of an empty string");
    const size_t i = first ? 0 : offsets.size() - 2;
    return Value::String(input.str().substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  return Value::Undefined("first/last of a value without items");
}

Value Reverse(const List& items) {
  List reversed(items.rbegin(), items.rend());
  return Value::FromList(std::move(reversed));
}

}  // namespace

absl::Status WorkBudget::Charge(int64_t bytes) {
  if (bytes > max_piece_) {
    return Invalid(absl::StrCat("the template builds a piece of ", bytes,
                                " bytes, more than the rendering may hold"));
  }
  left_ -= bytes;
  if (left_ >= 0) return absl::OkStatus();
  return Invalid(
      "the template builds more text than the render allows (a runaway loop or string "
      "repetition?)");
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& name = undefined.str();
  if (name.starts_with("'")) return Invalid(name);  // already a sentence: "'dict object' has..."
  return Invalid(absl::StrCat("'", name, "' is undefined"));
}

bool IsFilter(const std::string& name) {
  static constexpr std::string_view kFilters[] = {
      "trim",       "length",     "count",  "tojson",  "string", "lower", "upper", "title",
      "capitalize", "default",    "d",      "join",    "first",  "last",  "list",  "map",
      "selectattr", "rejectattr", "select", "reject",  "items",  "int",   "float", "replace",
      "safe",       "round",      "abs",    "reverse", "unique"};
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsTest(const std::string& name) {
  static constexpr std::string_view kTests[] = {
      "defined", "undefined", "none",    "string", "mapping", "iterable",    "sequence", "number",
      "integer", "float",     "boolean", "true",   "false",   "equalto",     "eq",       "==",
      "ne",      "!=",        "lt",      "<",      "le",      "<=",          "gt",       ">",
      "ge",      ">=",        "in",      "odd",    "even",    "divisibleby", "callable", "sameas"};
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args,
                                  WorkBudget& budget) {
  if (name == "trim") return Strip("trim", input, Argument(args, 0, "chars"), true, true);
  if (name == "length" || name == "count") {
    KELVIN_ASSIGN_OR_RETURN(const int64_t length, Length(input));
    return Value::Int(length);
  }
  if (name == "tojson") return ToJsonFilter(input, args, budget);
  if (name == "string") {
    std::string text = input.ToString();
    KELVIN_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(text.size())));
    return Value::String(std::move(text));
  }
  if (name == "safe") return input;
  if (name == "lower" || name == "upper") {
    const bool upper = name == "upper";
    KELVIN_ASSIGN_OR_RETURN(std::string text,
                            AsciiCase(name, input.ToString(),
                                      [&](char c, size_t) { return upper ? Upper(c) : Lower(c); }));
    return Value::String(std::move(text));
  }
  if (name == "title") {
    KELVIN_ASSIGN_OR_RETURN(std::string text, Title(input.ToString()));
    return Value::String(std::move(text));
  }
  if (name == "capitalize") {
    KELVIN_ASSIGN_OR_RETURN(std::string text, Capitalize(input.ToString()));
    return Value::String(std::move(text));
  }
  if (name == "default" || name == "d") {
    const Value* fallback = Argument(args, 0, "default_value");
    const Value* boolean = Argument(args, 1, "boolean");
    const bool use_default =
        input.is_undefined() || (boolean != nullptr && boolean->Truthy() && !input.Truthy());
    if (!use_default) return input;
    return fallback ? *fallback : Value::String("");
  }
  if (name == "join") return Join(input, args, budget);
  if (name == "first" || name == "last") return FirstOrLast(input, name == "first");
  if (name == "list") {
    KELVIN_ASSIGN_OR_RETURN(List items, Iterate(input));
    KELVIN_RETURN_IF_ERROR(budget.Charge(16 * static_cast<int64_t>(items.size())));
    return Value::FromList(std::move(items));
  }
  if (name == "reverse") {
    if (input.is_string()) {
      KELVIN_ASSIGN_OR_RETURN(const List characters, Iterate(input));
      std::string out;
      for (auto it = characters.rbegin(); it != characters.rend(); ++it) out += it->str();
      return Value::String(std::move(out));
    }
    KELVIN_ASSIGN_OR_RETURN(const List items, Iterate(input));
    return Reverse(items);
  }
  if (name == "unique") {
    KELVIN_ASSIGN_OR_RETURN(const List items, Iterate(input));
    List unique;
    for (const Value& item : items) {
      KELVIN_RETURN_IF_ERROR(budget.Charge(16 * static_cast<int64_t>(unique.size() + 1)));
      if (std::none_of(unique.begin(), unique.end(),
                       [&](const Value& seen) { return seen.Equals(item); })) {
        unique.push_back(item);
      }
    }
    return Value::FromList(std::move(unique));
  }
  if (name == "map") return Map(input, args, budget);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return Select(name, input, args);
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::FromList({});
    if (!input.is_dict()) return Invalid(absl::StrCat("items of a ", input.TypeName()));
    List pairs;
    for (const auto& [key, value] : input.dict().items) {
      pairs.push_back(Value::FromTuple({Value::String(key), value}));
    }
    return Value::FromList(std::move(pairs));
  }
  if (name == "int" || name == "float") {
    return ToNumber(input, Argument(args, 0, "default"), name == "int");
  }
  if (name == "replace") {
    return Replace(input, Argument(args, 0, "old"), Argument(args, 1, "new"),
                   Argument(args, 2, "count"), budget);
  }
  if (name == "round") return Round(input, args);
  if (name == "abs") {
    if (input.kind() == Kind::kInt || input.kind() == Kind::kBool) {
      if (input.as_int() == INT64_MIN) return Invalid("abs: integer overflow");
      return Value::Int(std::llabs(input.as_int()));
    }
    if (input.kind() == Kind::kFloat) return Value::Float(std::fabs(input.as_double()));
    return Invalid(absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  return Invalid(absl::StrCat("no filter named '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args) {
  const Value* other = Argument(args, 0, "value");
  const auto need_other = [&]() -> absl::Status {
    if (other == nullptr) return Invalid(absl::StrCat("the test '", name, "' needs an argument"));
    return absl::OkStatus();
  };
  const Kind kind = input.kind();
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_dict();
  if (name == "iterable") return input.is_list() || input.is_dict() || input.is_string();
  if (name == "sequence") return input.is_list() || input.is_dict() || input.is_string();
  if (name == "number") return input.is_number() || kind == Kind::kBool;
  if (name == "integer") return kind == Kind::kInt;
  if (name == "float") return kind == Kind::kFloat;
  if (name == "boolean") return kind == Kind::kBool;
  if (name == "true") return kind == Kind::kBool && input.as_bool();
  if (name == "false") return kind == Kind::kBool && !input.as_bool();
  if (name == "callable") return kind == Kind::kCallable;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
    KELVIN_RETURN_IF_ERROR(need_other());
    return input.Equals(*other);
  }
  if (name == "ne" || name == "!=") {
    KELVIN_RETURN_IF_ERROR(need_other());
    return !input.Equals(*other);
  }
  if (name == "in") {
    KELVIN_RETURN_IF_ERROR(need_other());
    if (other->is_string() && input.is_string()) {
      return other->str().find(input.str()) != std::string::npos;
    }
    if (other->is_dict()) return input.is_string() && other->dict().Find(input.str()) != nullptr;
    KELVIN_ASSIGN_OR_RETURN(const List items, Iterate(*other));
    return std::any_of(items.begin(), items.end(), [&](const Value& v) { return v.Equals(input); });
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (kind != Kind::kInt && kind != Kind::kBool) {
      return Invalid(
          absl::StrCat("the test '", name, "' needs an integer, got ", input.TypeName()));
    }
    if (name != "divisibleby") return (input.as_int() % 2 != 0) == (name == "odd");
    KELVIN_RETURN_IF_ERROR(need_other());
    if (other->kind() != Kind::kInt || other->as_int() == 0) {
      return Invalid("divisibleby needs a non-zero integer");
    }
    return input.as_int() % other->as_int() == 0;
  }
  if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == ">" ||
      name == "ge" || name == ">=") {
    KELVIN_RETURN_IF_ERROR(need_other());
    int order;
    if ((input.is_number() || kind == Kind::kBool) &&
        (other->is_number() || other->kind() == Kind::kBool)) {
      order = input.as_double() < other->as_double() ? -1 : input.as_double() > other->as_double();
    } else if (input.is_string() && other->is_string()) {
      order = input.str().compare(other->str());
    } else {
      return Invalid(absl::StrCat("'", name, "' not supported between a ", input.TypeName(),
                                  " and a ", other->TypeName()));
    }
    if (name == "lt" || name == "<") return order < 0;
    if (name == "le" || name == "<=") return order <= 0;
    if (name == "gt" || name == ">") return order > 0;
    return order >= 0;
  }
  return Invalid(absl::StrCat("no test named '", name, "'"));
}

std::optional<Value> BoundMethod(const Value& receiver, const std::string& name,
                                 WorkBudget& budget) {
  const auto method = [&](std::function<absl::StatusOr<Value>(const CallArgs&)> call) {
    Callable callable;
    callable.name = std::string(name);
    callable.builtin = std::move(call);
    return Value::FromCallable(std::move(callable));
  };
  const std::string method_name(name);
  if (receiver.is_string()) {
    const std::string text = receiver.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return method([=](const CallArgs& args) {
        return Strip(method_name, Value::String(text), Argument(args, 0, "chars"),
                     method_name != "rstrip", method_name != "lstrip");
      });
    }
    if (name == "split") {
      return method([=, &budget](const CallArgs& args) {
        return Split(text, Argument(args, 0, "sep"), Argument(args, 1, "maxsplit"), budget);
      });
    }
    if (name == "startswith" || name == "endswith") {
      return method([=](const CallArgs& args) {
        return AffixTest(method_name, text, Argument(args, 0, ""), method_name == "startswith");
      });
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      return method([=, &budget](const CallArgs&) {
        return ApplyFilter(method_name, Value::String(text), {}, budget);
      });
    }
    if (name == "replace") {
      return method([=, &budget](const CallArgs& args) {
        return Replace(Value::String(text), Argument(args, 0, "old"), Argument(args, 1, "new"),
                       Argument(args, 2, "count"), budget);
      });
    }
    if (name == "find") {
      return method([=](const CallArgs& args) -> absl::StatusOr<Value> {
        KELVIN_ASSIGN_OR_RETURN(const std::string piece,
                                StringArgument("find", Argument(args, 0, "")));
        const size_t found = text.find(piece);
        if (found == std::string::npos) return Value::Int(-1);
        return Value::Int(static_cast<int64_t>(CodePointOffsets(text.substr(0, found)).size() - 1));
      });
    }
    return std::nullopt;
  }
  static constexpr std::string_view kMutators[] = {"append", "extend",     "insert", "pop",
                                                   "remove", "clear",      "sort",   "reverse",
                                                   "update", "setdefault", "popitem"};
  if ((receiver.is_list() || (receiver.is_dict() && !receiver.dict().is_namespace)) &&
      std::find(std::begin(kMutators), std::end(kMutators), name) != std::end(kMutators)) {
    const std::string type = receiver.TypeName();
    return method([=](const CallArgs&) -> absl::StatusOr<Value> {
      return Invalid(absl::StrCat("calling ", type, ".", method_name,
                                  "() is not allowed: transformers renders chat templates in an "
                                  "immutable sandbox, where lists and dicts cannot change (build "
                                  "a new one, e.g. items + [item], or use namespace())"));
    });
  }
  if (!receiver.is_dict() || receiver.dict().is_namespace) return std::nullopt;
  const Value dict = receiver;
  if (name == "items" || name == "keys" || name == "values") {
    return method([=, &budget](const CallArgs&) -> absl::StatusOr<Value> {
      if (method_name == "items") return ApplyFilter("items", dict, {}, budget);
      List out;
      for (const auto& [key, value] : dict.dict().items) {
        out.push_back(method_name == "keys" ? Value::String(key) : value);
      }
      return Value::FromList(std::move(out));
    });
  }
  if (name == "get") {
    return method([=](const CallArgs& args) -> absl::StatusOr<Value> {
      const Value* key = Argument(args, 0, "key");
      const Value* fallback = Argument(args, 1, "default");
      const Value* found = key && key->is_string() ? dict.dict().Find(key->str()) : nullptr;
      if (found != nullptr) return *found;
      return fallback ? *fallback : Value::None();
    });
  }
  return std::nullopt;
}

}  // namespace kelvin::chat_template
