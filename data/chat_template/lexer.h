// The chat template's source as tokens, with Jinja2's whitespace control as transformers configures
// it: trim_blocks (the newline after a block tag or comment is dropped), lstrip_blocks (spaces and
// tabs before a block tag or comment at the start of a line are dropped), `{%-`/`-%}` (and the
// same on `{{ }}` and `{# #}`) strip all whitespace on that side, `{%+`/`+%}` turn the two off;
// newlines are normalized to \n and one trailing newline is dropped (keep_trailing_newline off).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kelvin::chat_template {

struct Token {
  enum class Kind {
    kText,        // literal output between tags
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifiers and keywords
    kString,      // a string literal, escapes resolved
    kInteger,
    kFloat,
    kOperator,  // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    kEnd,       // end of the template
  };
  Kind kind;
  std::string text;
  size_t offset;  // in the normalized source, for line and column
};

// The normalized source (what offsets index) and its tokens.
struct LexedTemplate {
  std::string source;
  std::vector<Token> tokens;

  // "line L, column C" of `offset` (1-based; columns count bytes).
  std::string Where(size_t offset) const;
};

// Errors (an unclosed tag, comment or string, a character no token starts with) name the line
// and column.
absl::StatusOr<LexedTemplate> Lex(std::string_view source);

}  // namespace kelvin::chat_template
