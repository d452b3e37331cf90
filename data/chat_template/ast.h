// The parsed template: expressions and statements, each with its source offset for errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/chat_template/value.h"

namespace kelvin::chat_template {

// Operands nest at most this deep (parser.cc), so evaluating one cannot exhaust the stack.
inline constexpr int kMaxExpressionDepth = 256;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,      // value
    kName,         // name
    kList,         // [args...]; kTuple the same, written (a, b)
    kDict,         // {keyword args}: keys in `args` (even) and values (odd)
    kAttribute,    // args[0].name
    kItem,         // args[0][args[1]]
    kSlice,        // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    kCall,         // args[0](args[1:], keywords)
    kFilter,       // args[0] | name(args[1:], keywords)
    kTest,         // args[0] is [not] name(args[1:])
    kUnary,        // name ("not", "-", "+") args[0]
    kBinary,       // args[0] name args[1]: arithmetic, ~, comparisons, in, not in
    kAnd,          // args[0] and args[1]
    kOr,           // args[0] or args[1]
    kConditional,  // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  size_t offset;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool negated = false;  // kTest: "is not"
  int depth = 1;         // of the tree below, bounded by kMaxExpressionDepth
};

struct Statement;
using Body = std::vector<std::unique_ptr<Statement>>;

struct MacroParameter {
  std::string name;
  ExprPtr default_value;  // null: none given
};

struct MacroStatement {
  std::string name;
  std::vector<MacroParameter> parameters;
  Body body;
};

struct Statement {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body), the else branch's condition null
    kFor,       // for targets in expr [if filter]: body [else: else_body]
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0] %}body{% endset
    kMacro,     // macro
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %}body{% endgeneration %}: assistant text
  };
  Kind kind;
  size_t offset;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attribute;  // kSet on a namespace attribute
  ExprPtr filter;
  bool uses_loop = false;  // kFor: its body reads `loop` (else the loop object is not built)
  Body body, else_body;
  std::unique_ptr<MacroStatement> macro;
};

}  // namespace kelvin::chat_template
