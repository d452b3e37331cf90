// The filters, tests and methods chat templates call, with Jinja2's and Python's semantics: each
// takes values and returns a value or an error message (the evaluator adds the line and column).
#pragma once

#include <optional>
#include <string_view>

#include "core/status.h"
#include "data/chat_template/value.h"

namespace kelvin::chat_template {

// Charged for the bytes a built-in builds (a string's length, 16 per list item), so the time of a
// render stays bounded: an error when the budget is spent, or when one piece alone is larger than
// `max_piece` (no string longer than the rendering may be is ever built).
class WorkBudget {
 public:
  WorkBudget(int64_t bytes, int64_t max_piece) : left_(bytes), max_piece_(max_piece) {}
  absl::Status Charge(int64_t bytes);

 private:
  int64_t left_;
  int64_t max_piece_;
};

bool IsFilter(const std::string& name);
bool IsTest(const std::string& name);

// `input | name(args)`.
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args,
                                  WorkBudget& budget);
// `input is name(args)`.
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args);

// `receiver.name` as a bound method when `name` is a method of the receiver's type (str: strip,
// split, startswith, ...; dict: items, keys, values, get); methods that would change a list or
// dict are callables whose call is an error, as in transformers' immutable sandbox.
std::optional<Value> BoundMethod(const Value& receiver, const std::string& name,
                                 WorkBudget& budget);

// An error naming an undefined value's name (what was looked up).
absl::Status UndefinedError(const Value& undefined);

}  // namespace kelvin::chat_template
