// The evaluator: statements and expressions of a parsed template over scoped variables (a for
// loop's body, a macro's call and the template each have their own, as in Jinja2), with the
// globals transformers adds and the bounds of RenderOptions.
#include "data/chat_template/template.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "data/chat_template/ast.h"
#include "data/chat_template/builtins.h"
#include "data/chat_template/lexer.h"
#include "data/chat_template/parser.h"
#include "data/chat_template/text.h"

namespace kelvin::chat_template {

struct ParsedTemplate {
  std::string name;
  LexedTemplate lexed;
  Body body;
  bool has_generation = false;
};

namespace {

using Kind = Value::Kind;

constexpr int kMaxMacroDepth = 32;  // nested macro calls (a macro may call itself)

bool HasGeneration(const Body& body) {
  for (const auto& statement : body) {
    if (statement->kind == Statement::Kind::kGeneration) return true;
    for (const auto& [condition, branch] : statement->branches) {
      if (HasGeneration(branch)) return true;
    }
    if (HasGeneration(statement->body) || HasGeneration(statement->else_body)) return true;
    if (statement->macro && HasGeneration(statement->macro->body)) return true;
  }
  return false;
}

bool UsesName(const Expr* expr, const std::string& name) {
  if (expr == nullptr) return false;
  if (expr->kind == Expr::Kind::kName && expr->name == name) return true;
  for (const ExprPtr& arg : expr->args) {
    if (UsesName(arg.get(), name)) return true;
  }
  for (const auto& [keyword, arg] : expr->keywords) {
    if (UsesName(arg.get(), name)) return true;
  }
  return false;
}

bool UsesName(const Body& body, const std::string& name) {
  for (const auto& statement : body) {
    if (UsesName(statement->expr.get(), name) || UsesName(statement->filter.get(), name) ||
        UsesName(statement->body, name) || UsesName(statement->else_body, name)) {
      return true;
    }
    for (const auto& [condition, branch] : statement->branches) {
      if (UsesName(condition.get(), name) || UsesName(branch, name)) return true;
    }
    if (statement->macro) {
      for (const MacroParameter& parameter : statement->macro->parameters) {
        if (UsesName(parameter.default_value.get(), name)) return true;
      }
      if (UsesName(statement->macro->body, name)) return true;
    }
  }
  return false;
}

// Marks the for loops whose body reads `loop`.
void MarkLoopUse(Body& body) {
  for (auto& statement : body) {
    if (statement->kind == Statement::Kind::kFor) {
      statement->uses_loop = UsesName(statement->body, "loop");
    }
    MarkLoopUse(statement->body);
    MarkLoopUse(statement->else_body);
    for (auto& [condition, branch] : statement->branches) MarkLoopUse(branch);
    if (statement->macro) MarkLoopUse(statement->macro->body);
  }
}

// Checks every filter and test name before rendering, so an unknown one is an error when the
// template is loaded.
absl::Status CheckNames(const Expr* expr, const LexedTemplate& lexed) {
  if (expr == nullptr) return absl::OkStatus();
  if (expr->kind == Expr::Kind::kFilter && !IsFilter(expr->name)) {
    return absl::InvalidArgumentError(absl::StrCat(lexed.Where(expr->offset), ": the filter '",
                                                   expr->name, "' is not supported"));
  }
  if (expr->kind == Expr::Kind::kTest && !IsTest(expr->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(lexed.Where(expr->offset), ": the test '", expr->name, "' is not supported"));
  }
  for (const ExprPtr& arg : expr->args) KELVIN_RETURN_IF_ERROR(CheckNames(arg.get(), lexed));
  for (const auto& [name, arg] : expr->keywords) {
    KELVIN_RETURN_IF_ERROR(CheckNames(arg.get(), lexed));
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const Body& body, const LexedTemplate& lexed) {
  for (const auto& statement : body) {
    KELVIN_RETURN_IF_ERROR(CheckNames(statement->expr.get(), lexed));
    KELVIN_RETURN_IF_ERROR(CheckNames(statement->filter.get(), lexed));
    for (const auto& [condition, branch] : statement->branches) {
      KELVIN_RETURN_IF_ERROR(CheckNames(condition.get(), lexed));
      KELVIN_RETURN_IF_ERROR(CheckNames(branch, lexed));
    }
    KELVIN_RETURN_IF_ERROR(CheckNames(statement->body, lexed));
    KELVIN_RETURN_IF_ERROR(CheckNames(statement->else_body, lexed));
    if (statement->macro) {
      for (const MacroParameter& parameter : statement->macro->parameters) {
        KELVIN_RETURN_IF_ERROR(CheckNames(parameter.default_value.get(), lexed));
      }
      KELVIN_RETURN_IF_ERROR(CheckNames(statement->macro->body, lexed));
    }
  }
  return absl::OkStatus();
}

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const ParsedTemplate& parsed, const RenderOptions& options)
      : parsed_(parsed),
        options_(options),
        budget_(options.max_bytes_built, options.max_output_bytes) {}

  absl::StatusOr<RenderResult> Run(const Dict& context) {
    frames_.emplace_back();
    for (const auto& [name, value] : context.items) frames_[0][name] = value;
    AddGlobals();
    Flow flow = Flow::kNormal;
    const absl::Status status = Execute(parsed_.body, flow);
    // A namespace can hold itself (`{% set ns.me = ns %}`): emptied here, its shared values free.
    for (const Value& space : namespaces_) space.mutable_dict().items.clear();
    KELVIN_RETURN_IF_ERROR(status);
    result_.text = std::move(out_);
    return std::move(result_);
  }

 private:
  absl::Status Error(size_t offset, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(parsed_.lexed.Where(offset), ": ", what));
  }
  // `status` (a built-in's message) at `offset`.
  absl::Status At(size_t offset, const absl::Status& status) const {
    if (status.ok()) return status;
    return Error(offset, std::string(status.message()));
  }

  absl::Status Step(size_t offset) {
    if (++steps_ <= options_.max_steps) return absl::OkStatus();
    return Error(offset, absl::StrCat("the template ran more than ", options_.max_steps,
                                      " steps (a runaway loop?)"));
  }

  absl::Status Write(std::string_view text, size_t offset) {
    if (static_cast<int64_t>(out_.size() + text.size()) > options_.max_output_bytes) {
      return Error(offset,
                   absl::StrCat("the rendering exceeds ", options_.max_output_bytes, " bytes"));
    }
    KELVIN_RETURN_IF_ERROR(At(offset, budget_.Charge(static_cast<int64_t>(text.size()))));
    out_.append(text);
    return absl::OkStatus();
  }

  // ---- variables ----

  const Value* Lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > barrier_;) {
      if (const auto it = frames_[i].find(name); it != frames_[i].end()) return &it->second;
    }
    if (const auto it = frames_[0].find(name); it != frames_[0].end()) return &it->second;
    return nullptr;
  }
  void Assign(const std::string& name, Value value) { frames_.back()[name] = std::move(value); }

  Value Builtin(std::string name, std::function<absl::StatusOr<Value>(const CallArgs&)> call) {
    Callable callable;
    callable.name = std::move(name);
    callable.builtin = std::move(call);
    return Value::FromCallable(std::move(callable));
  }

  void AddGlobals() {
    auto& globals = frames_[0];
    globals["raise_exception"] = Builtin("raise_exception", [](const CallArgs& args) {
      const std::string message =
          args.positional.empty() ? "raise_exception()" : args.positional[0].ToString();
      return absl::StatusOr<Value>(
          absl::InvalidArgumentError(absl::StrCat("the template raised an exception: ", message)));
    });
    globals["strftime_now"] =
        Builtin("strftime_now", [this](const CallArgs& args) -> absl::StatusOr<Value> {
          if (args.positional.size() != 1 || !args.positional[0].is_string()) {
            return absl::InvalidArgumentError("strftime_now takes one format string");
          }
          std::tm now{};
          if (options_.now.has_value()) {
            now = *options_.now;
          } else {
            const std::time_t seconds = std::time(nullptr);
            localtime_r(&seconds, &now);
          }
          const std::string& format = args.positional[0].str();
          if (format.size() > 256)
            return absl::InvalidArgumentError("strftime_now: format too long");
          char buffer[4096];
          const size_t written = std::strftime(buffer, sizeof(buffer), format.c_str(), &now);
          if (written == 0 && !format.empty()) {
            return absl::InvalidArgumentError("strftime_now: the format gives no text");
          }
          return Value::String(std::string(buffer, written));
        });
    globals["namespace"] =
        Builtin("namespace", [this](const CallArgs& args) -> absl::StatusOr<Value> {
          Dict attributes;
          attributes.is_namespace = true;
          for (const Value& positional : args.positional) {
            if (!positional.is_dict()) {
              return absl::InvalidArgumentError("namespace() takes a dict or keyword arguments");
            }
            for (const auto& [key, value] : positional.dict().items) attributes.Set(key, value);
          }
          for (const auto& [key, value] : args.named) attributes.Set(key, value);
          namespaces_.push_back(Value::FromDict(std::move(attributes)));
          return namespaces_.back();
        });
    globals["dict"] = Builtin("dict", [](const CallArgs& args) -> absl::StatusOr<Value> {
      if (!args.positional.empty()) {
        return absl::InvalidArgumentError("dict() takes keyword arguments only");
      }
      Dict dict;
      for (const auto& [key, value] : args.named) dict.Set(key, value);
      return Value::FromDict(std::move(dict));
    });
    globals["range"] = Builtin("range", [this](const CallArgs& args) -> absl::StatusOr<Value> {
      int64_t bounds[3] = {0, 0, 1};
      const size_t n = args.positional.size();
      if (n < 1 || n > 3 || !args.named.empty()) {
        return absl::InvalidArgumentError("range takes 1 to 3 integers");
      }
      for (size_t i = 0; i < n; ++i) {
        if (args.positional[i].kind() != Kind::kInt) {
          return absl::InvalidArgumentError("range takes integers");
        }
      }
      if (n == 1) {
        bounds[1] = args.positional[0].as_int();
      } else {
        bounds[0] = args.positional[0].as_int();
        bounds[1] = args.positional[1].as_int();
        if (n == 3) bounds[2] = args.positional[2].as_int();
      }
      if (bounds[2] == 0) return absl::InvalidArgumentError("range: the step is 0");
      const double count = std::max(0.0, std::ceil((static_cast<double>(bounds[1]) - bounds[0]) /
                                                   static_cast<double>(bounds[2])));
      if (count > 1e6) return absl::InvalidArgumentError("range: more than a million numbers");
      KELVIN_RETURN_IF_ERROR(budget_.Charge(16 * static_cast<int64_t>(count)));
      List numbers;
      for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
        numbers.push_back(Value::Int(bounds[0] + i * bounds[2]));
      }
      return Value::FromList(std::move(numbers));
    });
  }

  // ---- statements ----

  absl::Status Execute(const Body& body, Flow& flow) {
    for (const auto& statement : body) {
      KELVIN_RETURN_IF_ERROR(ExecuteOne(*statement, flow));
      if (flow != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status ExecuteOne(const Statement& statement, Flow& flow) {
    KELVIN_RETURN_IF_ERROR(Step(statement.offset));
    switch (statement.kind) {
      case Statement::Kind::kText:
        return Write(statement.text, statement.offset);
      case Statement::Kind::kOutput: {
        KELVIN_ASSIGN_OR_RETURN(const Value value, Evaluate(*statement.expr));
        return Write(value.ToString(), statement.offset);
      }
      case Statement::Kind::kIf:
        for (const auto& [condition, branch] : statement.branches) {
          bool taken = condition == nullptr;
          if (!taken) {
            KELVIN_ASSIGN_OR_RETURN(const Value value, Evaluate(*condition));
            taken = value.Truthy();
          }
          if (taken) return Execute(branch, flow);
        }
        return absl::OkStatus();
      case Statement::Kind::kFor:
        return ExecuteFor(statement);
      case Statement::Kind::kSet: {
        KELVIN_ASSIGN_OR_RETURN(Value value, Evaluate(*statement.expr));
        return AssignTargets(statement, std::move(value));
      }
      case Statement::Kind::kSetBlock: {
        KELVIN_ASSIGN_OR_RETURN(std::string text, Capture(statement.body));
        Assign(statement.targets[0], Value::String(std::move(text)));
        return absl::OkStatus();
      }
      case Statement::Kind::kMacro: {
        Callable callable;
        callable.name = statement.macro->name;
        callable.macro = statement.macro.get();
        Assign(statement.macro->name, Value::FromCallable(std::move(callable)));
        return absl::OkStatus();
      }
      case Statement::Kind::kBreak:
        flow = Flow::kBreak;
        return absl::OkStatus();
      case Statement::Kind::kContinue:
        flow = Flow::kContinue;
        return absl::OkStatus();
      case Statement::Kind::kGeneration: {
        const size_t begin = out_.size();
        KELVIN_RETURN_IF_ERROR(Execute(statement.body, flow));
        result_.generation_spans.emplace_back(begin, out_.size());
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // The text `body` writes, not added to the output (set blocks, macro calls).
  absl::StatusOr<std::string> Capture(const Body& body) {
    std::string saved = std::move(out_);
    out_.clear();
    Flow flow = Flow::kNormal;
    const absl::Status status = Execute(body, flow);
    std::string captured = std::move(out_);
    out_ = std::move(saved);
    KELVIN_RETURN_IF_ERROR(status);
    return captured;
  }

  absl::Status AssignTargets(const Statement& statement, Value value) {
    if (value.depth() > kMaxValueDepth) {
      return Error(statement.offset, "the value nests lists and dicts too deep");
    }
    if (!statement.attribute.empty()) {
      const Value* target = Lookup(statement.targets[0]);
      if (target == nullptr || !target->is_dict() || !target->dict().is_namespace) {
        return Error(statement.offset,
                     absl::StrCat("cannot assign the attribute '", statement.attribute, "' of '",
                                  statement.targets[0], "', which is not a namespace()"));
      }
      target->mutable_dict().Set(statement.attribute, std::move(value));
      return absl::OkStatus();
    }
    return Unpack(statement.targets, value, statement.offset,
                  [&](const std::string& name, Value item) { Assign(name, std::move(item)); });
  }

  template <typename AssignFn>
  absl::Status Unpack(const std::vector<std::string>& targets, const Value& value, size_t offset,
                      AssignFn assign) {
    if (targets.size() == 1) {
      assign(targets[0], value);
      return absl::OkStatus();
    }
    if (!value.is_list() || value.list().size() != targets.size()) {
      return Error(offset, absl::StrCat("cannot unpack a ", value.TypeName(), " into ",
                                        targets.size(), " variables"));
    }
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], value.list()[i]);
    return absl::OkStatus();
  }

  absl::Status ExecuteFor(const Statement& statement) {
    KELVIN_ASSIGN_OR_RETURN(const Value iterable, Evaluate(*statement.expr));
    if (iterable.is_none() || iterable.is_number() || iterable.kind() == Kind::kBool ||
        iterable.kind() == Kind::kCallable) {
      return Error(statement.expr->offset,
                   absl::StrCat("'", iterable.TypeName(), "' object is not iterable"));
    }
    Value listed = iterable;  // a list is gone through as it is; a dict, string, ... listed first
    if (!listed.is_list()) {
      KELVIN_ASSIGN_OR_RETURN(listed, ApplyFilter("list", iterable, {}, budget_));
    }
    const List* items = &listed.list();
    List kept;
    if (statement.filter != nullptr) {  // {% for x in xs if cond %}: loop.* counts what is kept
      for (const Value& item : *items) {
        frames_.emplace_back();
        absl::StatusOr<Value> keep =
            Unpack(
                statement.targets, item, statement.offset,
                [&](const std::string& name, Value v) {
                  Assign(name, std::move(v));
                }).ok()
                ? Evaluate(*statement.filter)
                : absl::StatusOr<Value>(Error(statement.offset, "cannot unpack a loop item"));
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) kept.push_back(item);
      }
      items = &kept;
    }
    if (items->empty()) {
      Flow flow = Flow::kNormal;
      return Execute(statement.else_body, flow);
    }
    const int64_t length = static_cast<int64_t>(items->size());
    for (int64_t i = 0; i < length; ++i) {
      KELVIN_RETURN_IF_ERROR(Step(statement.offset));
      frames_.emplace_back();
      if (statement.uses_loop) {
        Dict loop;
        loop.items = {{"index", Value::Int(i + 1)},
                      {"index0", Value::Int(i)},
                      {"revindex", Value::Int(length - i)},
                      {"revindex0", Value::Int(length - i - 1)},
                      {"first", Value::Bool(i == 0)},
                      {"last", Value::Bool(i == length - 1)},
                      {"length", Value::Int(length)},
                      {"depth", Value::Int(1)},
                      {"depth0", Value::Int(0)}};
        if (i > 0) loop.items.emplace_back("previtem", (*items)[static_cast<size_t>(i - 1)]);
        if (i + 1 < length)
          loop.items.emplace_back("nextitem", (*items)[static_cast<size_t>(i + 1)]);
        Assign("loop", Value::FromDict(std::move(loop)));
      }
      absl::Status status =
          Unpack(statement.targets, (*items)[static_cast<size_t>(i)], statement.offset,
                 [&](const std::string& name, Value v) { Assign(name, std::move(v)); });
      Flow flow = Flow::kNormal;
      if (status.ok()) status = Execute(statement.body, flow);
      frames_.pop_back();
      KELVIN_RETURN_IF_ERROR(status);
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  // ---- expressions ----

  absl::StatusOr<Value> Evaluate(const Expr& expr) {
    KELVIN_RETURN_IF_ERROR(Step(expr.offset));
    switch (expr.kind) {
      case Expr::Kind::kLiteral:
        return expr.value;
      case Expr::Kind::kName: {
        const Value* value = Lookup(expr.name);
        return value ? *value : Value::Undefined(expr.name);
      }
      case Expr::Kind::kList: {
        List items;
        for (const ExprPtr& arg : expr.args) {
          KELVIN_ASSIGN_OR_RETURN(Value item, Evaluate(*arg));
          items.push_back(std::move(item));
        }
        KELVIN_RETURN_IF_ERROR(
            At(expr.offset, budget_.Charge(16 * static_cast<int64_t>(items.size()))));
        return Value::FromList(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict dict;
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
          KELVIN_ASSIGN_OR_RETURN(const Value key, Evaluate(*expr.args[i]));
          if (!key.is_string()) return Error(expr.args[i]->offset, "dict keys must be strings");
          KELVIN_ASSIGN_OR_RETURN(Value value, Evaluate(*expr.args[i + 1]));
          dict.Set(key.str(), std::move(value));
        }
        return Value::FromDict(std::move(dict));
      }
      case Expr::Kind::kAttribute: {
        KELVIN_ASSIGN_OR_RETURN(const Value object, Evaluate(*expr.args[0]));
        return Attribute(object, expr.name, expr.offset);
      }
      case Expr::Kind::kItem: {
        KELVIN_ASSIGN_OR_RETURN(const Value object, Evaluate(*expr.args[0]));
        KELVIN_ASSIGN_OR_RETURN(const Value key, Evaluate(*expr.args[1]));
        return Item(object, key, expr.offset);
      }
      case Expr::Kind::kSlice:
        return Slice(expr);
      case Expr::Kind::kCall:
        return Call(expr);
      case Expr::Kind::kFilter: {
        KELVIN_ASSIGN_OR_RETURN(const Value input, Evaluate(*expr.args[0]));
        KELVIN_ASSIGN_OR_RETURN(const CallArgs args, Arguments(expr, 1));
        if (input.is_undefined() && expr.name != "default" && expr.name != "d" &&
            expr.name != "length" && expr.name != "count" && expr.name != "string" &&
            expr.name != "trim" && expr.name != "list" && expr.name != "safe" &&
            expr.name != "join" && expr.name != "lower" && expr.name != "upper") {
          return At(expr.offset, UndefinedError(input));
        }
        absl::StatusOr<Value> result = ApplyFilter(expr.name, input, args, budget_);
        if (!result.ok()) return At(expr.offset, result.status());
        return result;
      }
      case Expr::Kind::kTest: {
        KELVIN_ASSIGN_OR_RETURN(const Value input, Evaluate(*expr.args[0]));
        KELVIN_ASSIGN_OR_RETURN(const CallArgs args, Arguments(expr, 1));
        absl::StatusOr<bool> result = ApplyTest(expr.name, input, args);
        if (!result.ok()) return At(expr.offset, result.status());
        return Value::Bool(*result != expr.negated);
      }
      case Expr::Kind::kUnary: {
        KELVIN_ASSIGN_OR_RETURN(const Value operand, Evaluate(*expr.args[0]));
        if (expr.name == "not") return Value::Bool(!operand.Truthy());
        if (operand.kind() == Kind::kFloat) {
          return Value::Float(expr.name == "-" ? -operand.as_double() : operand.as_double());
        }
        if (operand.kind() == Kind::kInt || operand.kind() == Kind::kBool) {
          if (expr.name == "-" && operand.as_int() == INT64_MIN) {
            return Error(expr.offset, "integer overflow");
          }
          return Value::Int(expr.name == "-" ? -operand.as_int() : operand.as_int());
        }
        if (operand.is_undefined()) return At(expr.offset, UndefinedError(operand));
        return Error(expr.offset, absl::StrCat("bad operand type for unary ", expr.name, ": '",
                                               operand.TypeName(), "'"));
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        KELVIN_ASSIGN_OR_RETURN(Value left, Evaluate(*expr.args[0]));
        if (left.Truthy() == (expr.kind == Expr::Kind::kOr)) return left;
        return Evaluate(*expr.args[1]);
      }
      case Expr::Kind::kConditional: {
        KELVIN_ASSIGN_OR_RETURN(const Value condition, Evaluate(*expr.args[1]));
        if (condition.Truthy()) return Evaluate(*expr.args[0]);
        if (expr.args[2] == nullptr) return Value::Undefined("the inline if's missing else");
        return Evaluate(*expr.args[2]);
      }
      case Expr::Kind::kBinary: {
        KELVIN_ASSIGN_OR_RETURN(const Value left, Evaluate(*expr.args[0]));
        KELVIN_ASSIGN_OR_RETURN(const Value right, Evaluate(*expr.args[1]));
        return Binary(expr.name, left, right, expr.offset);
      }
    }
    return Error(expr.offset, "unknown expression");
  }

  absl::StatusOr<CallArgs> Arguments(const Expr& expr, size_t first) {
    CallArgs args;
    for (size_t i = first; i < expr.args.size(); ++i) {
      KELVIN_ASSIGN_OR_RETURN(Value value, Evaluate(*expr.args[i]));
      args.positional.push_back(std::move(value));
    }
    for (const auto& [name, arg] : expr.keywords) {
      KELVIN_ASSIGN_OR_RETURN(Value value, Evaluate(*arg));
      args.named.emplace_back(name, std::move(value));
    }
    return args;
  }

  absl::StatusOr<Value> Attribute(const Value& object, const std::string& name, size_t offset) {
    if (object.is_undefined()) return At(offset, UndefinedError(object));
    if (std::optional<Value> method = BoundMethod(object, name, budget_)) return *method;
    if (object.is_dict()) {
      if (const Value* found = object.dict().Find(name)) return *found;
      return Value::Undefined(
          absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
    }
    return Value::Undefined(
        absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
  }

  absl::StatusOr<Value> Item(const Value& object, const Value& key, size_t offset) {
    if (object.is_undefined()) return At(offset, UndefinedError(object));
    if (object.is_dict()) {
      if (key.is_string()) {
        if (const Value* found = object.dict().Find(key.str())) return *found;
        if (std::optional<Value> method = BoundMethod(object, key.str(), budget_)) return *method;
      }
      return Value::Undefined(
          absl::StrCat("'", object.TypeName(), " object' has no attribute ", key.Repr()));
    }
    if (object.is_list() || object.is_string()) {
      if (key.is_string()) return Attribute(object, key.str(), offset);
      if (key.kind() != Kind::kInt && key.kind() != Kind::kBool) {
        return Error(offset, absl::StrCat("indices must be integers, not ", key.TypeName()));
      }
      const std::vector<size_t> offsets =
          object.is_string() ? CodePointOffsets(object.str()) : std::vector<size_t>{};
      const int64_t size = object.is_list() ? static_cast<int64_t>(object.list().size())
                                            : static_cast<int64_t>(offsets.size()) - 1;
      int64_t index = key.as_int();
      if (index < 0) index += size;
      if (index < 0 || index >= size) {
        return Value::Undefined(absl::StrCat("index ", key.as_int(), " is out of range"));
      }
      if (object.is_list()) return object.list()[static_cast<size_t>(index)];
      const size_t i = static_cast<size_t>(index);
      return Value::String(object.str().substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    return Value::Undefined(
        absl::StrCat("'", object.TypeName(), " object' has no item ", key.Repr()));
  }

  absl::StatusOr<Value> Slice(const Expr& expr) {
    KELVIN_ASSIGN_OR_RETURN(const Value object, Evaluate(*expr.args[0]));
    int64_t parts[3];
    bool given[3];
    for (int i = 0; i < 3; ++i) {
      given[i] = false;
      if (expr.args[static_cast<size_t>(i + 1)] == nullptr) continue;
      KELVIN_ASSIGN_OR_RETURN(const Value part, Evaluate(*expr.args[static_cast<size_t>(i + 1)]));
      if (part.is_none()) continue;
      if (part.kind() != Kind::kInt) return Error(expr.offset, "slice indices must be integers");
      parts[i] = part.as_int();
      given[i] = true;
    }
    if (object.is_undefined()) return At(expr.offset, UndefinedError(object));
    if (!object.is_list() && !object.is_string()) {
      return Error(expr.offset, absl::StrCat("a ", object.TypeName(), " cannot be sliced"));
    }
    const std::vector<size_t> offsets =
        object.is_string() ? CodePointOffsets(object.str()) : std::vector<size_t>{};
    const int64_t size = object.is_list() ? static_cast<int64_t>(object.list().size())
                                          : static_cast<int64_t>(offsets.size()) - 1;
    const int64_t step = given[2] ? parts[2] : 1;
    if (step == 0) return Error(expr.offset, "slice step cannot be zero");
    // Python's slice.indices(size).
    const auto clamp = [&](int64_t value, bool is_given, int64_t fallback) {
      if (!is_given) return fallback;
      if (value < 0) value = std::max<int64_t>(value + size, step < 0 ? -1 : 0);
      return std::min<int64_t>(value, step < 0 ? size - 1 : size);
    };
    const int64_t start = clamp(parts[0], given[0], step < 0 ? size - 1 : 0);
    const int64_t stop = clamp(parts[1], given[1], step < 0 ? -1 : size);
    List items;
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      const size_t index = static_cast<size_t>(i);
      if (object.is_list()) {
        items.push_back(object.list()[index]);
      } else {
        text.append(object.str(), offsets[index], offsets[index + 1] - offsets[index]);
      }
    }
    KELVIN_RETURN_IF_ERROR(
        At(expr.offset, budget_.Charge(static_cast<int64_t>(text.size() + 16 * items.size()))));
    if (object.is_string()) return Value::String(std::move(text));
    return Value::FromList(std::move(items));
  }

  absl::StatusOr<Value> Call(const Expr& expr) {
    const Expr& callee = *expr.args[0];
    KELVIN_ASSIGN_OR_RETURN(const Value function, Evaluate(callee));
    KELVIN_ASSIGN_OR_RETURN(const CallArgs args, Arguments(expr, 1));
    if (function.is_undefined()) {
      if (callee.kind == Expr::Kind::kName) {
        return Error(expr.offset, absl::StrCat("'", callee.name,
                                               "' is undefined (no such variable, macro or "
                                               "function)"));
      }
      return At(expr.offset, UndefinedError(function));
    }
    if (function.kind() != Kind::kCallable) {
      return Error(expr.offset, absl::StrCat("'", function.TypeName(), "' object is not callable"));
    }
    const Callable& callable = function.callable();
    if (callable.macro == nullptr) {
      absl::StatusOr<Value> result = callable.builtin(args);
      if (!result.ok()) return At(expr.offset, result.status());
      return result;
    }
    return CallMacro(*callable.macro, args, expr.offset);
  }

  absl::StatusOr<Value> CallMacro(const MacroStatement& macro, const CallArgs& args,
                                  size_t offset) {
    if (macro_depth_ >= kMaxMacroDepth) {
      return Error(offset, absl::StrCat("macro calls nest more than ", kMaxMacroDepth, " deep"));
    }
    if (args.positional.size() > macro.parameters.size()) {
      return Error(offset,
                   absl::StrCat("the macro '", macro.name, "' takes ", macro.parameters.size(),
                                " arguments, got ", args.positional.size()));
    }
    for (const auto& [name, value] : args.named) {
      if (std::none_of(macro.parameters.begin(), macro.parameters.end(),
                       [&](const MacroParameter& p) { return p.name == name; })) {
        return Error(offset,
                     absl::StrCat("the macro '", macro.name, "' has no parameter '", name, "'"));
      }
    }
    const size_t saved_barrier = barrier_;
    frames_.emplace_back();
    barrier_ = frames_.size() - 1;
    ++macro_depth_;
    absl::StatusOr<std::string> text = [&]() -> absl::StatusOr<std::string> {
      for (size_t i = 0; i < macro.parameters.size(); ++i) {
        const MacroParameter& parameter = macro.parameters[i];
        Value value = Value::Undefined(parameter.name);
        if (i < args.positional.size()) {
          value = args.positional[i];
        } else if (const auto it = std::find_if(
                       args.named.begin(), args.named.end(),
                       [&](const auto& named) { return named.first == parameter.name; });
                   it != args.named.end()) {
          value = it->second;
        } else if (parameter.default_value != nullptr) {
          KELVIN_ASSIGN_OR_RETURN(value, Evaluate(*parameter.default_value));
        }
        Assign(parameter.name, std::move(value));
      }
      return Capture(macro.body);
    }();
    --macro_depth_;
    frames_.pop_back();
    barrier_ = saved_barrier;
    if (!text.ok()) return text.status();
    return Value::String(*std::move(text));
  }

  absl::StatusOr<Value> Binary(const std::string& op, const Value& left, const Value& right,
                               size_t offset) {
    if (op == "==") return Value::Bool(left.Equals(right));
    if (op == "!=") return Value::Bool(!left.Equals(right));
    if (op == "~") {
      const std::string a = left.ToString(), b = right.ToString();
      KELVIN_RETURN_IF_ERROR(At(offset, budget_.Charge(static_cast<int64_t>(a.size() + b.size()))));
      return Value::String(a + b);
    }
    if (op == "in" || op == "not in") {
      CallArgs args;
      args.positional.push_back(right);
      if (right.is_undefined()) return Value::Bool(op != "in");
      if (right.is_string() && !left.is_string()) {
        return Error(offset, absl::StrCat("'in <string>' requires a string as the left operand, "
                                          "not ",
                                          left.TypeName()));
      }
      absl::StatusOr<bool> found = ApplyTest("in", left, args);
      if (!found.ok()) return At(offset, found.status());
      return Value::Bool(*found == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      CallArgs args;
      args.positional.push_back(right);
      absl::StatusOr<bool> holds = ApplyTest(op, left, args);
      if (!holds.ok()) return At(offset, holds.status());
      return Value::Bool(*holds);
    }
    for (const Value* operand : {&left, &right}) {
      if (operand->is_undefined()) return At(offset, UndefinedError(*operand));
    }
    const bool numbers = (left.is_number() || left.kind() == Kind::kBool) &&
                         (right.is_number() || right.kind() == Kind::kBool);
    const bool integers = numbers && left.kind() != Kind::kFloat && right.kind() != Kind::kFloat;
    if (op == "+" || op == "-" || op == "*") {
      if (integers) {
        int64_t result;
        const bool overflow =
            op == "+"   ? __builtin_add_overflow(left.as_int(), right.as_int(), &result)
            : op == "-" ? __builtin_sub_overflow(left.as_int(), right.as_int(), &result)
                        : __builtin_mul_overflow(left.as_int(), right.as_int(), &result);
        if (overflow) return Error(offset, "integer overflow");
        return Value::Int(result);
      }
      if (numbers) {
        const double a = left.as_double(), b = right.as_double();
        return Value::Float(op == "+" ? a + b : op == "-" ? a - b : a * b);
      }
      if (op == "+" && left.is_string() && right.is_string()) {
        KELVIN_RETURN_IF_ERROR(At(
            offset, budget_.Charge(static_cast<int64_t>(left.str().size() + right.str().size()))));
        return Value::String(left.str() + right.str());
      }
      if (op == "+" && left.is_list() && right.is_list()) {
        List items = left.list();
        items.insert(items.end(), right.list().begin(), right.list().end());
        KELVIN_RETURN_IF_ERROR(At(offset, budget_.Charge(16 * static_cast<int64_t>(items.size()))));
        Value joined = Value::FromList(std::move(items));
        if (joined.depth() > kMaxValueDepth) return Error(offset, "lists nest too deep");
        return joined;
      }
      if (op == "*" && (left.is_string() || left.is_list()) && right.kind() == Kind::kInt) {
        return Repeat(left, right.as_int(), offset);
      }
      if (op == "*" && (right.is_string() || right.is_list()) && left.kind() == Kind::kInt) {
        return Repeat(right, left.as_int(), offset);
      }
    }
    if ((op == "/" || op == "//" || op == "%" || op == "**") && numbers) {
      if (op != "**" && right.as_double() == 0) return Error(offset, "division by zero");
      if (op == "/") return Value::Float(left.as_double() / right.as_double());
      if (integers && op != "**") {
        const int64_t a = left.as_int(), b = right.as_int();
        if (a == INT64_MIN && b == -1) return Error(offset, "integer overflow");
        int64_t quotient = a / b, remainder = a % b;
        if (remainder != 0 && ((remainder < 0) != (b < 0))) {  // Python floors
          --quotient;
          remainder += b;
        }
        return Value::Int(op == "//" ? quotient : remainder);
      }
      if (op == "**") {
        if (integers && right.as_int() >= 0) {
          int64_t result = 1;
          for (int64_t i = 0; i < right.as_int(); ++i) {
            if (__builtin_mul_overflow(result, left.as_int(), &result)) {
              return Error(offset, "integer overflow");
            }
            if (result == 0 || result == 1) break;
          }
          return Value::Int(result);
        }
        return Value::Float(std::pow(left.as_double(), right.as_double()));
      }
      const double a = left.as_double(), b = right.as_double();
      if (op == "//") return Value::Float(std::floor(a / b));
      const double remainder = std::fmod(a, b);
      return Value::Float(remainder != 0 && ((remainder < 0) != (b < 0)) ? remainder + b
                                                                         : remainder);
    }
    if (op == "%" && left.is_string()) {
      return Error(offset, "string formatting with % is not supported: use ~ or +");
    }
    return Error(offset, absl::StrCat("unsupported operand types for ", op, ": '", left.TypeName(),
                                      "' and '", right.TypeName(), "'"));
  }

  absl::StatusOr<Value> Repeat(const Value& sequence, int64_t times, size_t offset) {
    if (times <= 0) return sequence.is_string() ? Value::String("") : Value::FromList({});
    const int64_t unit = sequence.is_string() ? static_cast<int64_t>(sequence.str().size())
                                              : 16 * static_cast<int64_t>(sequence.list().size());
    if (unit > 0 && times > options_.max_output_bytes / unit) {
      return Error(offset, "the repetition builds more than the rendering may hold");
    }
    KELVIN_RETURN_IF_ERROR(At(offset, budget_.Charge(unit * times)));
    if (sequence.is_string()) {
      std::string text;
      for (int64_t i = 0; i < times; ++i) text += sequence.str();
      return Value::String(std::move(text));
    }
    List items;
    for (int64_t i = 0; i < times; ++i) {
      items.insert(items.end(), sequence.list().begin(), sequence.list().end());
    }
    return Value::FromList(std::move(items));
  }

  const ParsedTemplate& parsed_;
  const RenderOptions& options_;
  WorkBudget budget_;
  std::vector<std::unordered_map<std::string, Value>> frames_;
  std::vector<Value> namespaces_;  // every namespace() of this render, emptied when it ends
  size_t barrier_ = 0;             // frames below it (but frame 0) are hidden: a macro's caller's
  int macro_depth_ = 0;
  int64_t steps_ = 0;
  std::string out_;
  RenderResult result_;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source, std::string name) {
  const auto named = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat(name, ", ", status.message()));
  };
  auto parsed = std::make_shared<ParsedTemplate>();
  absl::StatusOr<LexedTemplate> lexed = Lex(source);
  if (!lexed.ok()) return named(lexed.status());
  parsed->lexed = *std::move(lexed);
  absl::StatusOr<Body> body = chat_template::Parse(parsed->lexed);
  if (!body.ok()) return named(body.status());
  parsed->body = *std::move(body);
  if (absl::Status names = CheckNames(parsed->body, parsed->lexed); !names.ok()) {
    return named(names);
  }
  parsed->has_generation = HasGeneration(parsed->body);
  MarkLoopUse(parsed->body);
  parsed->name = std::move(name);
  return Template(std::move(parsed));
}

absl::StatusOr<RenderResult> Template::Render(const Dict& context,
                                              const RenderOptions& options) const {
  absl::StatusOr<RenderResult> result = Renderer(*parsed_, options).Run(context);
  if (!result.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(parsed_->name, ", ", result.status().message()));
  }
  return result;
}

const std::string& Template::name() const { return parsed_->name; }
bool Template::has_generation_blocks() const { return parsed_->has_generation; }

absl::StatusOr<std::tm> ParseFixedDate(std::string_view text, const std::string& field) {
  std::tm time{};
  int year, month, day, hour = 0, minute = 0, second = 0;
  char tail = 0;
  const std::string copy(text);
  const int date_fields = std::sscanf(copy.c_str(), "%4d-%2d-%2d%c", &year, &month, &day, &tail);
  const bool date_only = date_fields == 3 && copy.size() == 10;
  const bool with_time =
      date_fields == 4 && tail == 'T' && copy.size() == 19 &&
      std::sscanf(copy.c_str() + 11, "%2d:%2d:%2d", &hour, &minute, &second) == 3;
  if ((!date_only && !with_time) || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
      minute > 59 || second > 59 || hour < 0 || minute < 0 || second < 0 || year < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " \"", copy.substr(0, 40), "\" is no date: give YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS"));
  }
  time.tm_year = year - 1900;
  time.tm_mon = month - 1;
  time.tm_mday = day;
  time.tm_hour = hour;
  time.tm_min = minute;
  time.tm_sec = second;
  std::tm normalized = time;
  const std::time_t seconds = timegm(&normalized);  // fills in the weekday and day of the year
  if (seconds == static_cast<std::time_t>(-1) || normalized.tm_mday != day) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " \"", copy, "\" is no date of the calendar"));
  }
  return normalized;
}

}  // namespace kelvin::chat_template
