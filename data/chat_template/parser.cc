// A recursive-descent parser for the template subset (see parser.h). Precedence, loosest first:
// `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then
// postfix (. [] ()) with filters (|) and tests (is) binding to the unary operand, as in Jinja2.
#include "data/chat_template/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kelvin::chat_template {
namespace {

using Kind = Token::Kind;

class Parser {
 public:
  explicit Parser(const LexedTemplate& lexed) : lexed_(lexed), tokens_(lexed.tokens) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string end;
    KELVIN_RETURN_IF_ERROR(ParseBody({}, body, end));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool IsOperator(std::string op, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(const std::string& name, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kName && Peek(ahead).text == name;
  }
  bool Accept(std::string op) {
    if (!IsOperator(op) && !IsName(op)) return false;
    ++pos_;
    return true;
  }

  absl::Status Error(size_t offset, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(lexed_.Where(offset), ": ", what));
  }
  static std::string Describe(const Token& token) {
    switch (token.kind) {
      case Kind::kEnd:
        return "the end of the template";
      case Kind::kBlockEnd:
        return "'%}'";
      case Kind::kVarEnd:
        return "'}}'";
      case Kind::kString:
        return "a string";
      default:
        return absl::StrCat("'", token.text, "'");
    }
  }
  absl::Status Expect(std::string op, std::string where) {
    if (Accept(op)) return absl::OkStatus();
    return Error(Peek().offset,
                 absl::StrCat("expected '", op, "' ", where, ", found ", Describe(Peek())));
  }
  absl::Status ExpectBlockEnd(std::string tag) {
    if (Peek().kind == Kind::kBlockEnd) {
      ++pos_;
      return absl::OkStatus();
    }
    return Error(Peek().offset, absl::StrCat("expected the end of the {% ", tag, " %} tag, found ",
                                             Describe(Peek())));
  }
  absl::StatusOr<std::string> ExpectName(const std::string& what) {
    if (Peek().kind != Kind::kName) {
      return Error(Peek().offset, absl::StrCat("expected ", what, ", found ", Describe(Peek())));
    }
    return Next().text;
  }

  // RAII depth counter for nested tags and expressions.
  struct Nest {
    explicit Nest(int& depth) : depth(depth) { ++depth; }
    ~Nest() { --depth; }
    int& depth;
  };
  absl::Status CheckDepth(size_t offset) const {
    if (depth_ <= kMaxNesting) return absl::OkStatus();
    return Error(offset, absl::StrCat("nested more than ", kMaxNesting,
                                      " levels deep (tags or parentheses)"));
  }

  // Statements until a {% tag %} named in `ends` (its name goes to `end`, the tag's name token
  // consumed) or the end of the template (only where `ends` is empty).
  absl::Status ParseBody(const std::vector<std::string>& ends, Body& body, std::string& end) {
    Nest nest(depth_);
    KELVIN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
    while (true) {
      const Token& token = Peek();
      if (token.kind == Kind::kEnd) {
        if (ends.empty()) return absl::OkStatus();
        return Error(token.offset, absl::StrCat("the template ends inside a block: expected {% ",
                                                ends.back(), " %}"));
      }
      if (token.kind == Kind::kText) {
        auto statement = NewStatement(Statement::Kind::kText, token.offset);
        statement->text = Next().text;
        body.push_back(std::move(statement));
        continue;
      }
      if (token.kind == Kind::kVarBegin) {
        ++pos_;
        auto statement = NewStatement(Statement::Kind::kOutput, token.offset);
        KELVIN_ASSIGN_OR_RETURN(statement->expr, ParseExpression());
        if (Peek().kind != Kind::kVarEnd) {
          return Error(Peek().offset, absl::StrCat("expected '}}' to end the expression, found ",
                                                   Describe(Peek())));
        }
        ++pos_;
        body.push_back(std::move(statement));
        continue;
      }
      // A block tag.
      ++pos_;
      const size_t offset = Peek().offset;
      KELVIN_ASSIGN_OR_RETURN(const std::string name, ExpectName("a statement name after {%"));
      for (const std::string& candidate : ends) {
        if (name == candidate) {
          end = name;
          return absl::OkStatus();
        }
      }
      KELVIN_ASSIGN_OR_RETURN(auto statement, ParseStatement(name, offset, ends));
      body.push_back(std::move(statement));
    }
  }

  std::unique_ptr<Statement> NewStatement(Statement::Kind kind, size_t offset) {
    auto statement = std::make_unique<Statement>();
    statement->kind = kind;
    statement->offset = offset;
    return statement;
  }

  absl::StatusOr<std::unique_ptr<Statement>> ParseStatement(const std::string& name, size_t offset,
                                                            const std::vector<std::string>& ends) {
    if (name == "if") return ParseIf(offset);
    if (name == "for") return ParseFor(offset);
    if (name == "set") return ParseSet(offset);
    if (name == "macro") return ParseMacro(offset);
    if (name == "generation") {
      auto statement = NewStatement(Statement::Kind::kGeneration, offset);
      KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("generation"));
      std::string end;
      KELVIN_RETURN_IF_ERROR(ParseBody({"endgeneration"}, statement->body, end));
      KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("endgeneration"));
      return statement;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) {
        return Error(offset, absl::StrCat("{% ", name, " %} outside a for loop"));
      }
      KELVIN_RETURN_IF_ERROR(ExpectBlockEnd(name));
      return NewStatement(name == "break" ? Statement::Kind::kBreak : Statement::Kind::kContinue,
                          offset);
    }
    static constexpr std::string_view kEnds[] = {"endif", "endfor", "endset",       "endmacro",
                                                 "elif",  "else",   "endgeneration"};
    for (const std::string_view known_end : kEnds) {
      if (name == known_end) {
        return Error(
            offset,
            absl::StrCat("{% ", name, " %} without its opening tag",
                         ends.empty() ? "" : absl::StrCat(" (expected {% ", ends.back(), " %})")));
      }
    }
    return Error(offset, absl::StrCat("{% ", name,
                                      " %} is not supported in chat templates (Kelvin has if, "
                                      "for, set, macro, break, continue and generation)"));
  }

  absl::StatusOr<std::unique_ptr<Statement>> ParseIf(size_t offset) {
    auto statement = NewStatement(Statement::Kind::kIf, offset);
    KELVIN_ASSIGN_OR_RETURN(ExprPtr condition, ParseExpression());
    while (true) {
      KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("if"));
      Body body;
      std::string end;
      KELVIN_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, body, end));
      statement->branches.emplace_back(std::move(condition), std::move(body));
      if (end == "endif") break;
      if (end == "else") {
        KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("else"));
        Body else_body;
        KELVIN_RETURN_IF_ERROR(ParseBody({"endif"}, else_body, end));
        statement->branches.emplace_back(nullptr, std::move(else_body));
        break;
      }
      KELVIN_ASSIGN_OR_RETURN(condition, ParseExpression());
    }
    KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("endif"));
    return statement;
  }

  absl::Status ParseTargets(std::vector<std::string>& targets, const std::string& what) {
    do {
      KELVIN_ASSIGN_OR_RETURN(std::string target, ExpectName(what));
      targets.push_back(std::move(target));
    } while (Accept(","));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Statement>> ParseFor(size_t offset) {
    auto statement = NewStatement(Statement::Kind::kFor, offset);
    KELVIN_RETURN_IF_ERROR(ParseTargets(statement->targets, "a loop variable after for"));
    KELVIN_RETURN_IF_ERROR(Expect("in", "after the loop variables"));
    KELVIN_ASSIGN_OR_RETURN(statement->expr, ParseOr());  // `if` here filters, not an inline if
    if (Accept("if")) {
      KELVIN_ASSIGN_OR_RETURN(statement->filter, ParseOr());
    }
    if (IsName("recursive")) {
      return Error(Peek().offset, "recursive loops are not supported in chat templates");
    }
    KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("for"));
    ++loop_depth_;
    std::string end;
    KELVIN_RETURN_IF_ERROR(ParseBody({"else", "endfor"}, statement->body, end));
    --loop_depth_;
    if (end == "else") {
      KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("else"));
      KELVIN_RETURN_IF_ERROR(ParseBody({"endfor"}, statement->else_body, end));
    }
    KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("endfor"));
    return statement;
  }

  absl::StatusOr<std::unique_ptr<Statement>> ParseSet(size_t offset) {
    auto statement = NewStatement(Statement::Kind::kSet, offset);
    KELVIN_RETURN_IF_ERROR(ParseTargets(statement->targets, "a variable name after set"));
    if (statement->targets.size() == 1 && Accept(".")) {
      KELVIN_ASSIGN_OR_RETURN(statement->attribute, ExpectName("an attribute name after '.'"));
    }
    if (Peek().kind == Kind::kBlockEnd) {  // {% set x %}...{% endset %}
      if (statement->targets.size() != 1 || !statement->attribute.empty()) {
        return Error(offset, "a {% set %} block assigns one variable");
      }
      ++pos_;
      statement->kind = Statement::Kind::kSetBlock;
      std::string end;
      KELVIN_RETURN_IF_ERROR(ParseBody({"endset"}, statement->body, end));
      KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("endset"));
      return statement;
    }
    KELVIN_RETURN_IF_ERROR(Expect("=", "after the variable of {% set %}"));
    KELVIN_ASSIGN_OR_RETURN(statement->expr, ParseTuple());
    KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("set"));
    return statement;
  }

  absl::StatusOr<std::unique_ptr<Statement>> ParseMacro(size_t offset) {
    auto statement = NewStatement(Statement::Kind::kMacro, offset);
    statement->macro = std::make_unique<MacroStatement>();
    KELVIN_ASSIGN_OR_RETURN(statement->macro->name, ExpectName("the macro's name"));
    KELVIN_RETURN_IF_ERROR(Expect("(", "after the macro's name"));
    while (!Accept(")")) {
      MacroParameter parameter;
      KELVIN_ASSIGN_OR_RETURN(parameter.name, ExpectName("a parameter name"));
      if (Accept("=")) {
        KELVIN_ASSIGN_OR_RETURN(parameter.default_value, ParseExpression());
      }
      statement->macro->parameters.push_back(std::move(parameter));
      if (!IsOperator(")")) KELVIN_RETURN_IF_ERROR(Expect(",", "between macro parameters"));
    }
    KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("macro"));
    std::string end;
    const int loops = loop_depth_;
    loop_depth_ = 0;
    KELVIN_RETURN_IF_ERROR(ParseBody({"endmacro"}, statement->macro->body, end));
    loop_depth_ = loops;
    if (Peek().kind == Kind::kName) ++pos_;  // {% endmacro name %}
    KELVIN_RETURN_IF_ERROR(ExpectBlockEnd("endmacro"));
    return statement;
  }

  ExprPtr NewExpr(Expr::Kind kind, size_t offset, std::string name = "") {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->offset = offset;
    expr->name = std::move(name);
    return expr;
  }

  // Makes `child` (null: an omitted slice part) an operand of `parent`, keeping the tree at most
  // kMaxExpressionDepth deep (a chain such as a + a + ... + a grows it without parentheses).
  absl::Status Adopt(Expr& parent, ExprPtr child) {
    if (child != nullptr) {
      parent.depth = std::max(parent.depth, child->depth + 1);
      if (parent.depth > kMaxExpressionDepth) {
        return Error(parent.offset, absl::StrCat("the expression nests more than ",
                                                 kMaxExpressionDepth, " operations deep"));
      }
    }
    parent.args.push_back(std::move(child));
    return absl::OkStatus();
  }

  // `a, b` (a tuple without parentheses, as {% set %} allows) or one expression.
  absl::StatusOr<ExprPtr> ParseTuple() {
    const size_t offset = Peek().offset;
    KELVIN_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOperator(",")) return first;
    ExprPtr tuple = NewExpr(Expr::Kind::kList, offset);
    KELVIN_RETURN_IF_ERROR(Adopt(*tuple, std::move(first)));
    while (Accept(",")) {
      KELVIN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      KELVIN_RETURN_IF_ERROR(Adopt(*tuple, std::move(item)));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    Nest nest(depth_);
    KELVIN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
    KELVIN_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const size_t offset = Next().offset;
      ExprPtr conditional = NewExpr(Expr::Kind::kConditional, offset);
      KELVIN_ASSIGN_OR_RETURN(ExprPtr condition, ParseOr());
      ExprPtr otherwise;
      if (Accept("else")) {
        KELVIN_ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      KELVIN_RETURN_IF_ERROR(Adopt(*conditional, std::move(expr)));
      KELVIN_RETURN_IF_ERROR(Adopt(*conditional, std::move(condition)));
      KELVIN_RETURN_IF_ERROR(Adopt(*conditional, std::move(otherwise)));
      expr = std::move(conditional);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    KELVIN_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      ExprPtr node = NewExpr(Expr::Kind::kOr, Next().offset);
      KELVIN_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(left)));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(right)));
      left = std::move(node);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    KELVIN_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      ExprPtr node = NewExpr(Expr::Kind::kAnd, Next().offset);
      KELVIN_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(left)));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(right)));
      left = std::move(node);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(depth_);
      KELVIN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
      ExprPtr node = NewExpr(Expr::Kind::kUnary, Next().offset, "not");
      KELVIN_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(operand)));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    KELVIN_ASSIGN_OR_RETURN(ExprPtr left, ParseBinary(0));
    bool compared = false;
    while (true) {
      std::string op;
      const size_t offset = Peek().offset;
      if (Peek().kind == Kind::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        op = Next().text;
      } else if (IsName("not") && IsName("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return left;
      }
      if (compared) {
        return Error(offset, "chained comparisons (a < b < c) are not supported: use 'and'");
      }
      compared = true;
      ExprPtr node = NewExpr(Expr::Kind::kBinary, offset, op);
      KELVIN_ASSIGN_OR_RETURN(ExprPtr right, ParseBinary(0));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(left)));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(right)));
      left = std::move(node);
    }
  }

  // Levels: 0 `+ -`, 1 `~`, 2 `* / // %`, 3 `**` (left-associative as Jinja2 parses it).
  absl::StatusOr<ExprPtr> ParseBinary(int level) {
    static const std::vector<std::vector<std::string>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == static_cast<int>(kLevels.size())) return ParseUnary();
    KELVIN_ASSIGN_OR_RETURN(ExprPtr left, ParseBinary(level + 1));
    while (true) {
      bool matched = false;
      for (const std::string& op : kLevels[static_cast<size_t>(level)]) {
        matched |= IsOperator(op);
      }
      if (!matched) return left;
      const Token& op = Next();
      ExprPtr node = NewExpr(Expr::Kind::kBinary, op.offset, op.text);
      KELVIN_ASSIGN_OR_RETURN(ExprPtr right, ParseBinary(level + 1));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(left)));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(right)));
      left = std::move(node);
    }
  }

  // `-x | f` is (-x) | f: filters and tests apply to the outermost unary operand, as in Jinja2.
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filters = true) {
    Nest nest(depth_);
    KELVIN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
    ExprPtr node;
    if (IsOperator("-") || IsOperator("+")) {
      const Token& op = Next();
      node = NewExpr(Expr::Kind::kUnary, op.offset, op.text);
      KELVIN_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(/*with_filters=*/false));
      KELVIN_RETURN_IF_ERROR(Adopt(*node, std::move(operand)));
    } else {
      KELVIN_ASSIGN_OR_RETURN(node, ParsePrimary());
      KELVIN_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    }
    if (!with_filters) return node;
    return ParseFiltersAndTests(std::move(node));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& token = Next();
    switch (token.kind) {
      case Kind::kString: {
        std::string text = token.text;
        while (Peek().kind == Kind::kString) text += Next().text;  // adjacent literals join
        ExprPtr literal = NewExpr(Expr::Kind::kLiteral, token.offset);
        literal->value = Value::String(std::move(text));
        return literal;
      }
      case Kind::kInteger: {
        int64_t value = 0;
        const auto [end, error] =
            std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
        if (error != std::errc()) {
          return Error(token.offset, absl::StrCat("the integer ", token.text, " is too large"));
        }
        ExprPtr literal = NewExpr(Expr::Kind::kLiteral, token.offset);
        literal->value = Value::Int(value);
        return literal;
      }
      case Kind::kFloat: {
        ExprPtr literal = NewExpr(Expr::Kind::kLiteral, token.offset);
        literal->value = Value::Float(std::strtod(token.text.c_str(), nullptr));
        return literal;
      }
      case Kind::kName: {
        ExprPtr literal = NewExpr(Expr::Kind::kLiteral, token.offset);
        if (token.text == "true" || token.text == "True") {
          literal->value = Value::Bool(true);
        } else if (token.text == "false" || token.text == "False") {
          literal->value = Value::Bool(false);
        } else if (token.text == "none" || token.text == "None") {
          literal->value = Value::None();
        } else {
          return NewExpr(Expr::Kind::kName, token.offset, token.text);
        }
        return literal;
      }
      case Kind::kOperator:
        if (token.text == "(") {
          if (Accept(")")) return NewExpr(Expr::Kind::kList, token.offset);  // ()
          KELVIN_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple());
          KELVIN_RETURN_IF_ERROR(Expect(")", "to close '('"));
          return inner;
        }
        if (token.text == "[") {
          ExprPtr list = NewExpr(Expr::Kind::kList, token.offset);
          while (!Accept("]")) {
            KELVIN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
            KELVIN_RETURN_IF_ERROR(Adopt(*list, std::move(item)));
            if (!IsOperator("]")) KELVIN_RETURN_IF_ERROR(Expect(",", "between list items"));
          }
          return list;
        }
        if (token.text == "{") {
          ExprPtr dict = NewExpr(Expr::Kind::kDict, token.offset);
          while (!Accept("}")) {
            KELVIN_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
            KELVIN_RETURN_IF_ERROR(Expect(":", "after a dict key"));
            KELVIN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
            KELVIN_RETURN_IF_ERROR(Adopt(*dict, std::move(key)));
            KELVIN_RETURN_IF_ERROR(Adopt(*dict, std::move(value)));
            if (!IsOperator("}")) KELVIN_RETURN_IF_ERROR(Expect(",", "between dict items"));
          }
          return dict;
        }
        break;
      default:
        break;
    }
    return Error(token.offset, absl::StrCat("expected a value, found ", Describe(token)));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const size_t offset = Peek().offset;
      if (Accept(".")) {
        if (Peek().kind == Kind::kInteger) {  // foo.0 is foo[0]
          ExprPtr item = NewExpr(Expr::Kind::kItem, offset);
          ExprPtr index = NewExpr(Expr::Kind::kLiteral, Peek().offset);
          index->value = Value::Int(std::atoll(Next().text.c_str()));
          KELVIN_RETURN_IF_ERROR(Adopt(*item, std::move(node)));
          KELVIN_RETURN_IF_ERROR(Adopt(*item, std::move(index)));
          node = std::move(item);
          continue;
        }
        KELVIN_ASSIGN_OR_RETURN(std::string name, ExpectName("an attribute name after '.'"));
        ExprPtr attribute = NewExpr(Expr::Kind::kAttribute, offset, std::move(name));
        KELVIN_RETURN_IF_ERROR(Adopt(*attribute, std::move(node)));
        node = std::move(attribute);
      } else if (Accept("[")) {
        KELVIN_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), offset));
      } else if (IsOperator("(")) {
        ExprPtr call = NewExpr(Expr::Kind::kCall, node->offset);  // errors point at the callee
        KELVIN_RETURN_IF_ERROR(Adopt(*call, std::move(node)));
        KELVIN_RETURN_IF_ERROR(ParseArguments(*call));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, size_t offset) {
    std::vector<ExprPtr> parts(1);
    bool slice = false;
    while (!Accept("]")) {
      if (Accept(":")) {
        slice = true;
        if (parts.size() == 3) return Error(offset, "a slice has at most start:stop:step");
        parts.emplace_back();
        continue;
      }
      if (parts.back() != nullptr) return Error(Peek().offset, "expected ']' or ':'");
      KELVIN_ASSIGN_OR_RETURN(parts.back(), ParseExpression());
    }
    if (!slice) {
      if (parts[0] == nullptr) return Error(offset, "an empty subscript []");
      ExprPtr item = NewExpr(Expr::Kind::kItem, offset);
      KELVIN_RETURN_IF_ERROR(Adopt(*item, std::move(node)));
      item->args.push_back(std::move(parts[0]));
      return item;
    }
    parts.resize(3);
    ExprPtr result = NewExpr(Expr::Kind::kSlice, offset);
    KELVIN_RETURN_IF_ERROR(Adopt(*result, std::move(node)));
    for (ExprPtr& part : parts) KELVIN_RETURN_IF_ERROR(Adopt(*result, std::move(part)));
    return result;
  }

  // `(a, b, name=c)` into `call`'s args (after what is already there) and keywords.
  absl::Status ParseArguments(Expr& call) {
    KELVIN_RETURN_IF_ERROR(Expect("(", "to start the arguments"));
    while (!Accept(")")) {
      if (Peek().kind == Kind::kName && IsOperator("=", 1)) {
        std::string name = Next().text;
        ++pos_;
        KELVIN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        call.depth = std::max(call.depth, value->depth + 1);
        call.keywords.emplace_back(std::move(name), std::move(value));
      } else {
        if (IsOperator("*") || IsOperator("**")) {
          return Error(Peek().offset, "*args and **kwargs in calls are not supported");
        }
        if (!call.keywords.empty()) {
          return Error(Peek().offset, "a positional argument after a keyword argument");
        }
        KELVIN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        KELVIN_RETURN_IF_ERROR(Adopt(call, std::move(value)));
      }
      if (!IsOperator(")")) KELVIN_RETURN_IF_ERROR(Expect(",", "between arguments"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseFiltersAndTests(ExprPtr node) {
    while (true) {
      const size_t offset = Peek().offset;
      if (Accept("|")) {
        KELVIN_ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name after '|'"));
        ExprPtr filter = NewExpr(Expr::Kind::kFilter, offset, std::move(name));
        KELVIN_RETURN_IF_ERROR(Adopt(*filter, std::move(node)));
        if (IsOperator("(")) KELVIN_RETURN_IF_ERROR(ParseArguments(*filter));
        node = std::move(filter);
      } else if (Accept("is")) {
        const bool negated = Accept("not");
        KELVIN_ASSIGN_OR_RETURN(std::string name, ExpectName("a test name after 'is'"));
        ExprPtr test = NewExpr(Expr::Kind::kTest, offset, std::move(name));
        test->negated = negated;
        KELVIN_RETURN_IF_ERROR(Adopt(*test, std::move(node)));
        if (IsOperator("(")) {
          KELVIN_RETURN_IF_ERROR(ParseArguments(*test));
        } else if (Peek().kind == Kind::kString || Peek().kind == Kind::kInteger ||
                   Peek().kind == Kind::kFloat ||
                   (Peek().kind == Kind::kName && !IsName("and") && !IsName("or") &&
                    !IsName("else") && !IsName("if") && !IsName("in") && !IsName("not") &&
                    !IsName("is"))) {
          KELVIN_ASSIGN_OR_RETURN(ExprPtr argument, ParsePrimary());  // `is divisibleby 3`
          KELVIN_ASSIGN_OR_RETURN(argument, ParsePostfix(std::move(argument)));
          KELVIN_RETURN_IF_ERROR(Adopt(*test, std::move(argument)));
        }
        node = std::move(test);
      } else {
        return node;
      }
    }
  }

  const LexedTemplate& lexed_;
  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(const LexedTemplate& lexed) { return Parser(lexed).Run(); }

}  // namespace kelvin::chat_template
