// The values a chat template computes with, as Python and Jinja2 see them: undefined, none, bool,
// int, float, string, list, dict (keys in insertion order, as JSON objects are read), a namespace
// (a dict whose attributes a template may assign) and callables (macros, globals, bound methods).
// Values are immutable once built except namespaces, so copies share their lists and strings.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kelvin::chat_template {

class Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;                         // undefined
  static Value Undefined(std::string name);  // `name`: what was looked up, for error messages
  static Value None();
  static Value Bool(bool value);
  static Value Int(int64_t value);
  static Value Float(double value);
  static Value String(std::string value);
  static Value FromList(List items);
  static Value FromTuple(List items);  // a list that prints as Python's tuple: ('a', 1)
  static Value FromDict(Dict dict);
  static Value FromCallable(Callable callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }  // kInt and kBool
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *string_; }  // kString; kUndefined: the name
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_dict() const { return *dict_; }  // namespaces only
  const Callable& callable() const { return *callable_; }
  // Levels of lists and dicts (0 for a scalar), bounded so printing a value cannot recurse deeply.
  int depth() const { return depth_; }

  // Python's truthiness (an undefined value is false).
  bool Truthy() const;
  // Python's str(): what {{ value }} prints ("" for undefined, None, True, 1.5, ['a'], {'k': 1}).
  std::string ToString() const;
  // Python's repr() (strings quoted), as str() of a list shows its items.
  std::string Repr() const { return Repr(0); }
  // Python's ==, as Jinja compares (1 == 1.0, True == 1; undefined equals only undefined).
  bool Equals(const Value& other) const { return Equals(other, 0); }
  // The Python type name, for error messages ("str", "int", "list", "dict", "undefined").
  const char* TypeName() const;

 private:
  // `level`: how deep inside the value printed or compared (a namespace can contain itself).
  std::string Repr(int level) const;
  bool Equals(const Value& other, int level) const;

  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  int depth_ = 0;
  bool tuple_ = false;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // in insertion order
  bool is_namespace = false;

  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);  // replaces the value of an existing key in place
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

struct MacroStatement;  // ast.h

// A macro (run by the evaluator) or a built-in function / bound method.
struct Callable {
  std::string name;
  const MacroStatement* macro = nullptr;
  std::function<absl::StatusOr<Value>(const CallArgs&)> builtin;
};

// Lists and dicts nest at most this deep (a template that builds deeper ones gets an error).
inline constexpr int kMaxValueDepth = 256;

// A JSON value (messages, tools) as a template value; deeper than `max_depth` is an error.
absl::StatusOr<Value> FromJson(const nlohmann::json& json, int max_depth);

// JSON text (a line of a samples file, a conversation) as a value, keys in the order written, as
// Python's json reads them for transformers. A key that appears twice in an object, nesting deeper
// than `max_depth`, or text that is no JSON is an error.
absl::StatusOr<Value> ParseJson(std::string_view text, int max_depth);

// Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...),
// as transformers' tojson filter calls it; indent < 0: none. Undefined and callables are errors.
absl::StatusOr<std::string> ToJson(const Value& value, int indent, bool sort_keys,
                                   std::string_view item_separator, std::string_view key_separator);

// Python's repr() of a float (1.0, 0.1, 1e-05, 1e+16, inf, nan).
std::string PythonFloatRepr(double value);

}  // namespace kelvin::chat_template
