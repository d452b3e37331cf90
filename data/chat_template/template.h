// A Hugging Face chat template, parsed once and rendered per conversation: the subset of Jinja2
// that chat templates use (docs/formats.md, Chat templates, lists it), rendered as transformers
// renders it (trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now, a tojson
// that keeps UTF-8). Errors name the template, the line, the column and the construct. A render
// is bounded in output, steps and the bytes it builds, so a hostile template ends in an error.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/chat_template/value.h"

namespace kelvin::chat_template {

struct RenderOptions {
  // What strftime_now() formats: a fixed time for reproducible data, else the local time now.
  std::optional<std::tm> now;
  int64_t max_output_bytes = int64_t{64} << 20;
  int64_t max_steps = 2'000'000;               // statements and expressions evaluated
  int64_t max_bytes_built = int64_t{1} << 30;  // strings and lists built along the way
};

struct RenderResult {
  std::string text;
  // [begin, end) byte ranges of text written inside {% generation %} blocks.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

struct ParsedTemplate;  // template.cc

class Template {
 public:
  // `name` starts every error ("/m/chat_template.jinja").
  static absl::StatusOr<Template> Parse(std::string_view source, std::string name);

  // Renders with `context`'s variables (messages, add_generation_prompt, bos_token, ...).
  absl::StatusOr<RenderResult> Render(const Dict& context, const RenderOptions& options) const;

  const std::string& name() const;
  // Whether the template marks assistant text with {% generation %} (transformers'
  // return_assistant_tokens_mask).
  bool has_generation_blocks() const;

 private:
  explicit Template(std::shared_ptr<const ParsedTemplate> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const ParsedTemplate> parsed_;
};

// "2026-12-07" or "2026-12-07T13:45:00" as a time for RenderOptions::now; an error names `field`.
absl::StatusOr<std::tm> ParseFixedDate(std::string_view text, const std::string& field);

}  // namespace kelvin::chat_template
