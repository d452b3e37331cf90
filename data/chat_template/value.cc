// Template values: construction, Python's str/repr/==/truthiness, JSON in and out.
#include "data/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "data/chat_template/text.h"

namespace kelvin::chat_template {

Value Value::Undefined(std::string name) {
  Value value;
  value.string_ = std::make_shared<const std::string>(std::move(name));
  return value;
}
Value Value::None() {
  Value value;
  value.kind_ = Kind::kNone;
  return value;
}
Value Value::Bool(bool b) {
  Value value;
  value.kind_ = Kind::kBool;
  value.bool_ = b;
  value.int_ = b ? 1 : 0;
  return value;
}
Value Value::Int(int64_t i) {
  Value value;
  value.kind_ = Kind::kInt;
  value.int_ = i;
  return value;
}
Value Value::Float(double f) {
  Value value;
  value.kind_ = Kind::kFloat;
  value.float_ = f;
  return value;
}
Value Value::String(std::string s) {
  Value value;
  value.kind_ = Kind::kString;
  value.string_ = std::make_shared<const std::string>(std::move(s));
  return value;
}
Value Value::FromList(List items) {
  Value value;
  value.kind_ = Kind::kList;
  for (const Value& item : items) value.depth_ = std::max(value.depth_, item.depth_ + 1);
  if (items.empty()) value.depth_ = 1;
  value.list_ = std::make_shared<const List>(std::move(items));
  return value;
}
Value Value::FromTuple(List items) {
  Value value = FromList(std::move(items));
  value.tuple_ = true;
  return value;
}

Value Value::FromDict(Dict dict) {
  Value value;
  value.kind_ = Kind::kDict;
  value.depth_ = 1;
  for (const auto& [key, item] : dict.items) value.depth_ = std::max(value.depth_, item.depth_ + 1);
  value.dict_ = std::make_shared<Dict>(std::move(dict));
  return value;
}
Value Value::FromCallable(Callable callable) {
  Value value;
  value.kind_ = Kind::kCallable;
  value.callable_ = std::make_shared<const Callable>(std::move(callable));
  return value;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_;
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip, in scientific form: d.ddde[+-]x.
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  const int exponent = std::stoi(scientific.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (const char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {  // Python's repr switches to exponent notation here
    out += digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) {
    return absl::StrCat(out, "0.", std::string(static_cast<size_t>(-exponent - 1), '0'), digits);
  }
  const size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) {
    return absl::StrCat(out, digits, std::string(integer_digits - digits.size(), '0'), ".0");
  }
  return absl::StrCat(out, digits.substr(0, integer_digits), ".", digits.substr(integer_digits));
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *string_;
    default:
      return Repr();
  }
}

std::string Value::Repr(int level) const {
  if (level > kMaxValueDepth) return "...";
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_ ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_);
    case Kind::kFloat:
      return PythonFloatRepr(float_);
    case Kind::kString:
      return PythonStringRepr(*string_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", (*list_)[i].Repr(level + 1));
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", PythonStringRepr(dict_->items[i].first), ": ",
                        dict_->items[i].second.Repr(level + 1));
      }
      return out + (dict_->is_namespace ? "}>" : "}");
    }
    case Kind::kCallable:
      return absl::StrCat("<function ", callable_->name, ">");
  }
  return "";
}

bool Value::Equals(const Value& other, int level) const {
  if (level > kMaxValueDepth) return false;
  if (is_number() || kind_ == Kind::kBool) {
    if (!other.is_number() && other.kind_ != Kind::kBool) return false;
    if (kind_ != Kind::kFloat && other.kind_ != Kind::kFloat) return int_ == other.int_;
    return as_double() == other.as_double();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *string_ == *other.string_;
    case Kind::kList:
      return std::equal(list_->begin(), list_->end(), other.list_->begin(), other.list_->end(),
                        [&](const Value& a, const Value& b) { return a.Equals(b, level + 1); });
    case Kind::kDict: {
      if (dict_->items.size() != other.dict_->items.size()) return false;
      for (const auto& [key, value] : dict_->items) {
        const Value* found = other.dict_->Find(key);
        if (found == nullptr || !value.Equals(*found, level + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return callable_ == other.callable_;
    default:
      return false;
  }
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "";
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [name, value] : items) {
    if (name == key) return &value;
  }
  return nullptr;
}

void Dict::Set(std::string key, Value value) {
  for (auto& [name, existing] : items) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

absl::StatusOr<Value> FromJson(const nlohmann::json& json, int max_depth) {
  if (max_depth < 0) {
    return absl::InvalidArgumentError(
        "the value is nested too deep for a chat template (more levels of arrays and objects "
        "than a conversation has)");
  }
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(value));
      return Value::Int(static_cast<int64_t>(value));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(json.size());
      for (const nlohmann::json& item : json) {
        KELVIN_ASSIGN_OR_RETURN(Value value, FromJson(item, max_depth - 1));
        items.push_back(std::move(value));
      }
      return Value::FromList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      dict.items.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        KELVIN_ASSIGN_OR_RETURN(Value value, FromJson(item, max_depth - 1));
        dict.items.emplace_back(key, std::move(value));
      }
      return Value::FromDict(std::move(dict));
    }
    default:
      return absl::InvalidArgumentError("binary data is no chat template value");
  }
}

namespace {

// Builds a Value from nlohmann's SAX events: open containers on a stack, keys kept in order.
class ValueBuilder final : public nlohmann::json::json_sax_t {
 public:
  explicit ValueBuilder(int max_depth) : max_depth_(max_depth) {}

  std::string error;
  Value result;

  bool null() override { return Add(Value::None()); }
  bool boolean(bool value) override { return Add(Value::Bool(value)); }
  bool number_integer(number_integer_t value) override { return Add(Value::Int(value)); }
  bool number_unsigned(number_unsigned_t value) override {
    if (value > static_cast<uint64_t>(INT64_MAX))
      return Add(Value::Float(static_cast<double>(value)));
    return Add(Value::Int(static_cast<int64_t>(value)));
  }
  bool number_float(number_float_t value, const string_t&) override {
    return Add(Value::Float(value));
  }
  bool string(string_t& value) override { return Add(Value::String(std::move(value))); }
  bool binary(binary_t&) override { return Stop("binary data is no JSON text"); }
  bool start_object(std::size_t) override { return Open(false); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& name) override {
    Container& top = stack_.back();
    if (!top.keys.insert(name).second) {
      return Stop(absl::StrCat("the key \"", name.substr(0, 80), "\" appears twice in an object"));
    }
    top.key = std::move(name);
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& exception) override {
    const std::string what = exception.what();
    const size_t column = what.find("column ");
    return Stop(
        absl::StrCat("not valid JSON: ", column == std::string::npos ? what : what.substr(column)));
  }

 private:
  struct Container {
    bool is_array;
    List items;
    Dict dict;
    std::string key;
    std::unordered_set<std::string> keys;
  };

  bool Stop(std::string message) {
    error = std::move(message);
    return false;
  }
  bool Add(Value value) {
    if (stack_.empty()) {
      result = std::move(value);
    } else if (stack_.back().is_array) {
      stack_.back().items.push_back(std::move(value));
    } else {
      stack_.back().dict.items.emplace_back(std::move(stack_.back().key), std::move(value));
    }
    return true;
  }
  bool Open(bool is_array) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      return Stop(absl::StrCat("arrays and objects nest more than ", max_depth_, " levels deep"));
    }
    stack_.push_back({is_array, {}, {}, {}, {}});
    return true;
  }
  bool Close() {
    Container top = std::move(stack_.back());
    stack_.pop_back();
    return Add(top.is_array ? Value::FromList(std::move(top.items))
                            : Value::FromDict(std::move(top.dict)));
  }

  int max_depth_;
  std::vector<Container> stack_;
};

void AppendJsonString(std::string_view text, std::string& out) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  bool sort_keys;
  std::string_view item_separator, key_separator;
  std::string out;

  void NewLine(int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  }

  absl::Status Write(const Value& value, int level) {
    if (level > kMaxValueDepth) {
      return absl::InvalidArgumentError("tojson: the value nests too deep (or contains itself)");
    }
    switch (value.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        out += value.as_bool() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        absl::StrAppend(&out, value.as_int());
        return absl::OkStatus();
      case Value::Kind::kFloat: {
        const double f = value.as_double();
        out += std::isnan(f)   ? "NaN"
               : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                               : PythonFloatRepr(f);
        return absl::OkStatus();
      }
      case Value::Kind::kString:
        AppendJsonString(value.str(), out);
        return absl::OkStatus();
      case Value::Kind::kList:
      case Value::Kind::kDict: {
        const bool is_list = value.is_list();
        std::vector<std::pair<std::string_view, const Value*>> items;
        if (is_list) {
          for (const Value& item : value.list()) items.emplace_back("", &item);
        } else {
          for (const auto& [key, item] : value.dict().items) items.emplace_back(key, &item);
          if (sort_keys) std::stable_sort(items.begin(), items.end());
        }
        out += is_list ? '[' : '{';
        if (items.empty()) {
          out += is_list ? ']' : '}';
          return absl::OkStatus();
        }
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_separator;
          if (indent >= 0) NewLine(level + 1);
          if (!is_list) {
            AppendJsonString(items[i].first, out);
            out += key_separator;
          }
          KELVIN_RETURN_IF_ERROR(Write(*items[i].second, level + 1));
        }
        if (indent >= 0) NewLine(level);
        out += is_list ? ']' : '}';
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "tojson: a value of type ", value.TypeName(), " is not JSON serializable",
            value.is_undefined() ? absl::StrCat(" ('", value.str(), "' is undefined)") : ""));
    }
  }
};

}  // namespace

absl::StatusOr<Value> ParseJson(std::string_view text, int max_depth) {
  ValueBuilder builder(max_depth);
  if (!nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &builder)) {
    return absl::InvalidArgumentError(builder.error);
  }
  return std::move(builder.result);
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent, bool sort_keys,
                                   std::string_view item_separator,
                                   std::string_view key_separator) {
  JsonWriter writer{indent, sort_keys, item_separator, key_separator, {}};
  KELVIN_RETURN_IF_ERROR(writer.Write(value, 0));
  return std::move(writer.out);
}

}  // namespace kelvin::chat_template
