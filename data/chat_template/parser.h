// Tokens into statements and expressions, with Jinja2's grammar and operator precedence for the
// subset chat templates use; anything else is an error naming its line, column and construct.
#pragma once

#include "core/status.h"
#include "data/chat_template/ast.h"
#include "data/chat_template/lexer.h"

namespace kelvin::chat_template {

// Tags and parentheses nest at most this deep (so a hostile template cannot exhaust the stack).
inline constexpr int kMaxNesting = 100;

absl::StatusOr<Body> Parse(const LexedTemplate& lexed);

}  // namespace kelvin::chat_template
