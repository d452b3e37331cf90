// The chat template engine construct by construct: whitespace control, expressions, filters,
// tests, statements, macros and namespaces render as jinja2 in transformers' environment rendered
// them (engine_cases.jsonl, recorded by tools/make_chat_template_fixture.py); every error names
// the template, line, column and construct; hostile templates end in errors within their bounds;
// a model directory's template is found as transformers finds it.
#include "data/chat_template/template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/chat_template/model_template.h"
#include "tests/core/io/test_files.h"

namespace kelvin::chat_template {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/";

RenderOptions FixedDate() {
  RenderOptions options;
  options.now = *ParseFixedDate("2026-12-07T09:30:00", "the date");
  return options;
}

absl::StatusOr<std::string> Render(const std::string& source, const Value& context,
                                   const RenderOptions& options = FixedDate()) {
  KELVIN_ASSIGN_OR_RETURN(const Template parsed, Template::Parse(source, "t.jinja"));
  KELVIN_ASSIGN_OR_RETURN(RenderResult result, parsed.Render(context.dict(), options));
  return std::move(result.text);
}

absl::StatusOr<std::string> Render(const std::string& source, const std::string& variables = "{}",
                                   const RenderOptions& options = FixedDate()) {
  KELVIN_ASSIGN_OR_RETURN(const Value context, ParseJson(variables, 16));
  return Render(source, context, options);
}

std::string ErrorOf(const std::string& source, const std::string& variables = "{}",
                    const RenderOptions& options = FixedDate()) {
  const absl::StatusOr<std::string> result = Render(source, variables, options);
  EXPECT_FALSE(result.ok()) << source << " rendered " << *result;
  return result.ok() ? "" : std::string(result.status().message());
}

TEST(ChatTemplate, EachConstructRendersAsJinja2) {
  std::ifstream lines(kFixtures + "chat_templates/engine_cases.jsonl");
  std::string line;
  int outputs = 0, errors = 0;
  while (std::getline(lines, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string source = record["template"];
    SCOPED_TRACE(source);
    // The variables with their keys in the order written ({% for k in d %} goes through it).
    const absl::StatusOr<Value> ordered = ParseJson(line, 16);
    ASSERT_TRUE(ordered.ok()) << ordered.status();
    const absl::StatusOr<std::string> text = Render(source, *ordered->dict().Find("variables"));
    if (record.contains("error")) {
      EXPECT_FALSE(text.ok()) << "jinja2: " << record["error"] << "; Kelvin rendered " << *text;
      ++errors;
    } else {
      ASSERT_TRUE(text.ok()) << text.status();
      EXPECT_EQ(*text, record["output"].get<std::string>());
      ++outputs;
    }
  }
  EXPECT_EQ(outputs, 36);
  EXPECT_EQ(errors, 5);
}

TEST(ChatTemplate, ErrorsNameTheTemplateLineColumnAndConstruct) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\n{% include 'x' %}",
       "t.jinja, line 2, column 4: {% include %} is not supported in chat "
       "templates (Kelvin has if, for, set, macro, break, continue and "
       "generation)"},
      {"{{ x | wordcount }}", "t.jinja, line 1, column 6: the filter 'wordcount' is not supported"},
      {"{{ x is lower }}", "line 1, column 6: the test 'lower' is not supported"},
      {"{% if x %}", "line 1, column 11: the template ends inside a block: expected {% endif %}"},
      {"{% endfor %}", "line 1, column 4: {% endfor %} without its opening tag"},
      {"{{ x", "line 1, column 1: this {{ is never closed by }}"},
      {"{# x", "line 1, column 1: a comment {# is never closed by #}"},
      {"{{ 'x }}", "line 1, column 4: a string literal is never closed"},
      {"{{ a < b < c }}", "line 1, column 10: chained comparisons (a < b < c) are not supported"},
      {"{{ x ! y }}", "line 1, column 6: unexpected character '!'"},
      {"{% break %}", "line 1, column 4: {% break %} outside a for loop"},
      {"{{ f(*a) }}", "*args and **kwargs in calls are not supported"},
      {"{% for x in y recursive %}{% endfor %}", "recursive loops are not supported"},
      {"{{ (((((((((( 1 )))))))))) }}" + std::string(""), ""},  // deep but fine
      {"\n  {{ x.y }}", "t.jinja, line 2, column 7: 'x' is undefined"},
      {"{{ raise_exception('Roles must alternate') }}",
       "line 1, column 4: the template raised an exception: Roles must alternate"},
      {"{{ [1].append(2) }}",
       "calling list.append() is not allowed: transformers renders chat "
       "templates in an immutable sandbox"},
      {"{{ 1 + 'a' }}", "line 1, column 6: unsupported operand types for +: 'int' and 'str'"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
      {"{{ 1 // 0 }}", "division by zero"},
      {"{% set x.y = 1 %}", "cannot assign the attribute 'y' of 'x', which is not a namespace()"},
      {"{{ nothing() }}", "'nothing' is undefined (no such variable, macro or function)"},
      {"{% for a, b in [1] %}{% endfor %}", "cannot unpack a int into 2 variables"},
      {"{{ 'É' | lower }}", "lower of text with non-ASCII characters is not supported"},
      {"{{ x | tojson }}", "line 1, column 6: 'x' is undefined"},
      {"{{ [x] | tojson }}", "tojson: a value of type undefined is not JSON serializable"},
      {"{{ strftime_now(1) }}", "strftime_now takes one format string"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "the macro 'm' takes 1 arguments, got 2"},
      {"{% for x in 5 %}{% endfor %}", "line 1, column 13: 'int' object is not iterable"},
      // Bytes that are not UTF-8 are the template's error, not the first sample's.
      {"ab\nc\xff{{ 1 }}", "t.jinja, line 2, column 2: the byte 0xFF is not UTF-8"},
      // int of a number beyond Kelvin's 64-bit integers: jinja2 renders Python's long integer
      // (or, for infinity, raises OverflowError); Kelvin never renders another number.
      {"{{ (1e308 * 10) | int }}", "int: cannot convert float infinity to integer"},
      {"{{ 1e300 | int }}", "int: 1e+300 is beyond the 64-bit integers"},
      {"{{ 9.3e18 | int }}", "int: 9.3e+18 is beyond the 64-bit integers"},
      {"{{ '99999999999999999999' | int }}", "int: 1e+20 is beyond the 64-bit integers"},
  };
  for (const auto& [source, expected] : cases) {
    SCOPED_TRACE(source);
    if (expected.empty()) {
      EXPECT_TRUE(Render(source).ok());
      continue;
    }
    EXPECT_THAT(ErrorOf(source), HasSubstr(expected));
  }
}

TEST(ChatTemplate, HostileTemplatesEndInErrorsWithinTheirBounds) {
  EXPECT_THAT(ErrorOf("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
              HasSubstr("nested more than 100 levels deep"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_THAT(ErrorOf(chain + " }}"), HasSubstr("the expression nests more than 256"));
  std::string tags;
  for (int i = 0; i < 1000; ++i) tags += "{% if true %}";
  EXPECT_THAT(ErrorOf(tags), HasSubstr("nested more than 100 levels deep"));
  EXPECT_THAT(ErrorOf("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}"
                      "{% endfor %}"),
              HasSubstr("steps (a runaway loop?)"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(100) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("more than the rendering may hold"));
  EXPECT_THAT(ErrorOf("{{ 'x' * 100000000000 }}"), HasSubstr("repetition builds more"));
  EXPECT_THAT(ErrorOf("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
              HasSubstr("macro calls nest more than 32 deep"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                      "{% set ns.l = [ns.l] %}{% endfor %}"),
              HasSubstr("nests lists and dicts too deep"));
  EXPECT_THAT(ErrorOf("{{ range(10000000) }}"), HasSubstr("range: more than a million numbers"));
  RenderOptions small = FixedDate();
  small.max_output_bytes = 1000;
  EXPECT_THAT(ErrorOf("{% for i in range(50) %}{{ 'x' * 30 }}{% endfor %}", "{}", small),
              HasSubstr("the rendering exceeds 1000 bytes"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}"),
              HasSubstr("tojson: the value nests too deep (or contains itself)"));
}

// What jinja2's int filter gives where its int() fails: the default, not an error.
TEST(ChatTemplate, IntOfNotANumberIsTheDefault) {
  EXPECT_EQ(*Render("{{ 'inf' | int }},{{ 'nan' | int(7) }},{{ (1e308 * 10 - 1e308 * 10) | int }}"),
            "0,7,0");
  EXPECT_EQ(*Render("{{ -9.2e18 | int }},{{ '-12.7' | int }}"), "-9200000000000000000,-12");
}

TEST(ChatTemplate, GenerationBlocksMarkTheirOutput) {
  absl::StatusOr<Template> parsed = Template::Parse(
      "a{% generation %}bc{% endgeneration %}d{% generation %}e{% endgeneration %}", "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->has_generation_blocks());
  absl::StatusOr<RenderResult> result = parsed->Render({}, FixedDate());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->text, "abcde");
  EXPECT_EQ(result->generation_spans, (std::vector<std::pair<size_t, size_t>>{{1, 3}, {4, 5}}));
}

TEST(ChatTemplate, FixedDatesAreCheckedDates) {
  EXPECT_TRUE(ParseFixedDate("2024-02-29", "--chat-date").ok());
  for (const char* bad : {"2023-02-29", "07/12/2026", "2026-13-01", "2026-12-07T25:00:00", ""}) {
    EXPECT_THAT(std::string(ParseFixedDate(bad, "--chat-date").status().message()),
                HasSubstr("--chat-date \""))
        << bad;
  }
}

// A model directory as transformers 5 reads it: chat_template.jinja first, then
// tokenizer_config.json's string or named list; a wrong type or a dangling link is an error.
TEST(ModelChatTemplate, FoundAsTransformersFindsIt) {
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("tokenizer_config.json"),
                     R"({"chat_template": "config", "eos_token": {"content": "</s>"}})");
  absl::StatusOr<ModelTemplate> model = ModelTemplate::FromDirectory(dir.Path(""));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->SpecialToken("eos_token"), "</s>");
  auto rendered = [](const ModelTemplate& m, bool tools, const std::string& name = "") {
    absl::StatusOr<const Template*> chosen = m.Select(tools, name);
    if (!chosen.ok()) return std::string(chosen.status().message());
    return (*chosen)->Render({}, FixedDate())->text;
  };
  EXPECT_EQ(rendered(*model, false), "config");
  testing::WriteFile(dir.Path("chat_template.jinja"), "file\n");
  EXPECT_EQ(rendered(*ModelTemplate::FromDirectory(dir.Path("")), false), "file");

  testing::ScratchDir named;
  testing::WriteFile(
      named.Path("tokenizer_config.json"),
      R"({"chat_template": [{"name": "default", "template": "d"},)"
      R"( {"name": "tool_use", "template": "t"}, {"name": "rag", "template": "r"}]})");
  model = ModelTemplate::FromDirectory(named.Path(""));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(rendered(*model, false), "d");
  EXPECT_EQ(rendered(*model, true), "t");
  EXPECT_EQ(rendered(*model, false, "rag"), "r");
  EXPECT_THAT(rendered(*model, false, "nope"), HasSubstr("has no chat template named \"nope\""));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"chat_template": 5})", "tokenizer_config.json's chat_template is 5, not a string"},
      {R"({"chat_template": ["x"]})",
       "tokenizer_config.json's chat_template[0] is \"x\", not a {\"name\": \"...\", "
       "\"template\": \"...\"} object"},
      {R"({"chat_template": []})", "chat_template is an empty list"},
      {R"({"chat_template": "{% if %}"})",
       "tokenizer_config.json's chat_template, line 1, "
       "column 7: expected a value, found '%}'"},
  };
  for (const auto& [config, expected] : bad) {
    testing::ScratchDir bad_dir;
    testing::WriteFile(bad_dir.Path("tokenizer_config.json"), config);
    EXPECT_THAT(std::string(ModelTemplate::FromDirectory(bad_dir.Path("")).status().message()),
                HasSubstr(expected));
  }
  testing::ScratchDir linked;
  std::filesystem::create_symlink(linked.Path("gone.jinja"), linked.Path("chat_template.jinja"));
  EXPECT_THAT(std::string(ModelTemplate::FromDirectory(linked.Path("")).status().message()),
              HasSubstr("chat_template.jinja is a broken symbolic link (to "));
  testing::ScratchDir empty;
  const absl::Status none = ModelTemplate::FromDirectory(empty.Path("")).status();
  EXPECT_TRUE(absl::IsNotFound(none));
  EXPECT_THAT(std::string(none.message()), HasSubstr("has no chat template"));
}

}  // namespace
}  // namespace kelvin::chat_template
