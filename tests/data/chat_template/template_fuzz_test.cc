// Fuzzing the chat template engine: 3000 deterministic mutations of the written templates (a
// piece of template syntax inserted, a byte deleted or replaced, a span duplicated, the text cut
// short), each parsed and rendered on a conversation with tools. Each renders, or fails with an
// error that names the template and a line and column (or raised / undefined / a bound); none
// crashes or runs past its bounds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/io/regular_file.h"
#include "data/chat_template/chat.h"

namespace kelvin::chat_template {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Mutate(std::string source, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  static const std::vector<std::string> kPieces = {
      "{%",
      "%}",
      "{{",
      "}}",
      "{#",
      "#}",
      "-",
      "+",
      "(",
      ")",
      "[",
      "]",
      "{",
      "}",
      "|",
      ".",
      "'",
      "\"",
      ",",
      ":",
      " if ",
      " else ",
      " for ",
      " in ",
      " not ",
      " and ",
      " is ",
      "{% for x in range(100000) %}",
      "{% endfor %}",
      "{% if x %}",
      "{% endif %}",
      "loop.",
      "namespace(",
      "ns.",
      " ~ ",
      " * 1000000",
      "messages",
      "| tojson",
      "| map(attribute='x')",
      "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
      "{% set ns = namespace(a=1) %}",
      "\\",
      "\n",
      "raise_exception('x')",
      "[::-1]",
      "{% break %}",
      "{% generation %}"};
  const size_t at = pick(0, source.size() - 1);
  switch (pick(0, 4)) {
    case 0:
      source.insert(at, kPieces[pick(0, kPieces.size() - 1)]);
      break;
    case 1:
      source.erase(at, pick(1, 8));
      break;
    case 2:
      source[at] = "{}%#()[]'\"|-~ \n"[pick(0, 14)];
      break;
    case 3: {
      const size_t length = pick(1, std::min<size_t>(200, source.size() - at));
      source.insert(pick(0, source.size()), source.substr(at, length));
      break;
    }
    default:
      source.resize(at);
      break;
  }
  return source;
}

TEST(ChatTemplateFuzz, MutatedTemplatesRenderOrFailNamingWhere) {
  const std::string dir = std::string(KELVIN_FIXTURES_DIR) + "/chat_templates/";
  std::vector<std::string> sources;
  for (const char* name : {"llama31_style", "qwen25_style", "smollm2_style", "mistral_style",
                           "llama2_style", "gemma_style", "chatml_generation"}) {
    absl::StatusOr<std::string> source =
        io::ReadRegularFile(dir + name + ".jinja", "chat template", 1 << 20);
    ASSERT_TRUE(source.ok()) << source.status();
    sources.push_back(*source);
  }
  absl::StatusOr<Value> conversation = ParseJson(
      R"({"messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": "Weather?"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
           "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
          {"role": "tool", "content": "-3 C"}, {"role": "assistant", "content": "Cold."}],
          "tools": [{"type": "function", "function": {"name": "get_weather"}}],
          "bos_token": "<s>", "eos_token": "</s>"})",
      8);
  ASSERT_TRUE(conversation.ok()) << conversation.status();
  RenderOptions options;
  options.now = *ParseFixedDate("2026-12-07", "the date");
  options.max_steps = 200000;  // the fuzz runs 3000 renders; the bounds hold at any setting
  options.max_output_bytes = 1 << 20;
  options.max_bytes_built = 16 << 20;
  std::mt19937_64 rng(20261207);
  int rendered = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string source = sources[static_cast<size_t>(trial) % sources.size()];
    for (size_t mutations = 1 + static_cast<size_t>(trial % 3); mutations-- > 0;) {
      if (!source.empty()) source = Mutate(source, rng);
    }
    SCOPED_TRACE(source);
    absl::StatusOr<Template> parsed = Template::Parse(source, "fuzzed.jinja");
    absl::StatusOr<RenderResult> result = parsed.ok()
                                              ? parsed->Render(conversation->dict(), options)
                                              : absl::StatusOr<RenderResult>(parsed.status());
    if (result.ok()) {
      ++rendered;
      EXPECT_LE(result->text.size(), size_t{1} << 20);
      continue;
    }
    ++refused;
    const std::string message(result.status().message());
    EXPECT_THAT(message, StartsWith("fuzzed.jinja, line "));
    EXPECT_THAT(message, HasSubstr(", column "));
  }
  EXPECT_GT(rendered, 300);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace kelvin::chat_template
