// Chat lines in prepare-data rendered by the model's own template: a default system prompt, a
// dated header (--chat-date), tools and an assistant's tool calls reach the rendering; a line
// nested 10^5 deep or with a key given twice is an error naming the line, not a crash; so is a
// template that renders nothing of the assistant's turns.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/corpus/mmap_indexed_dataset.h"
#include "data/sft/jsonl_samples.h"
#include "tests/core/io/test_files.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/";

// A model directory: a fixture tokenizer with one of the written chat templates.
void MakeModel(const testing::ScratchDir& dir, const std::string& tokenizer,
               const std::string& chat_template) {
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(kFixtures + "tokenizer/" + tokenizer + "/" + file, dir.Path(file));
  }
  std::filesystem::copy_file(kFixtures + "chat_templates/" + chat_template + ".jinja",
                             dir.Path("chat_template.jinja"));
}

// The text of the first sample prepare-data writes for `line`, and its trained text.
std::pair<std::string, std::string> Prepare(const std::string& model, const std::string& line,
                                            const std::string& chat_date = "") {
  absl::StatusOr<TextSampleEncoder> encoder = TextSampleEncoder::FromDirectory(model, chat_date);
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("s.jsonl"), line + "\n");
  absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("sft"), &*encoder);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  if (!prepared.ok()) return {};
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(dir.Path("sft"));
  absl::StatusOr<TokenCorpus> mask = OpenMegatronDataset(dir.Path("sft_loss_mask"));
  EXPECT_TRUE(corpus.ok() && mask.ok());
  std::vector<int64_t> tokens(static_cast<size_t>(corpus->num_tokens()));
  std::vector<int64_t> targets(tokens.size());
  corpus->Read(0, tokens);
  mask->Read(0, targets);
  std::vector<int32_t> all, trained;
  for (size_t i = 0; i < tokens.size(); ++i) {
    all.push_back(static_cast<int32_t>(tokens[i]));
    if (targets[i] == 1) trained.push_back(static_cast<int32_t>(tokens[i]));
  }
  return {*encoder->tokenizer().Decode(all, false), *encoder->tokenizer().Decode(trained, false)};
}

TEST(ChatSamples, TheTemplatesDefaultSystemPromptIsRendered) {
  testing::ScratchDir model;
  MakeModel(model, "qwen2_style", "smollm2_style");
  const auto [text, trained] = Prepare(
      model.Path(""),
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})");
  EXPECT_EQ(text,
            "<|im_start|>system\nYou are a small helpful assistant trained by the Kelvin "
            "tests.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "Hello<|im_end|>\n");
  EXPECT_EQ(trained, "Hello<|im_end|>");
}

TEST(ChatSamples, TheChatDateFixesTheTemplatesDate) {
  testing::ScratchDir model;
  MakeModel(model, "llama3_style", "llama31_style");
  const std::string line =
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
  EXPECT_THAT(Prepare(model.Path(""), line, "2024-07-23").first,
              HasSubstr("Cutting Knowledge Date: December 2023\nToday Date: 23 Jul 2024\n\n"));
  absl::StatusOr<TextSampleEncoder> bad =
      TextSampleEncoder::FromDirectory(model.Path(""), "tomorrow");
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("--chat-date \"tomorrow\" is no date: give YYYY-MM-DD"));
}

TEST(ChatSamples, ToolsAndAnAssistantsToolCallsReachTheTemplate) {
  testing::ScratchDir model;
  MakeModel(model, "qwen2_style", "qwen25_style");
  const auto [text, trained] = Prepare(
      model.Path(""),
      R"({"messages": [{"role": "user", "content": "Weather in Oslo?"},)"
      R"( {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":)"
      R"( {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},)"
      R"( {"role": "tool", "content": "-3 C"}, {"role": "assistant", "content": "It is -3 C."}],)"
      R"( "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})");
  EXPECT_THAT(text, HasSubstr("<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
                              "\"get_weather\", \"parameters\": {}}}\n</tools>"));
  EXPECT_THAT(text, HasSubstr("<tool_response>\n-3 C\n</tool_response>"));
  EXPECT_EQ(trained,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
            "</tool_call><|im_end|>It is -3 C.<|im_end|>");
}

// A template that renders nothing of the assistant's turns gives the sample no target: the error
// names the line and the template, not the "labels" a chat line does not have.
TEST(ChatSamples, ATemplateWithoutTheAssistantsTurnsIsAnErrorNamingTheLine) {
  testing::ScratchDir model;
  MakeModel(model, "qwen2_style", "smollm2_style");
  testing::WriteFile(model.Path("chat_template.jinja"),
                     "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}"
                     "{% endif %}{% endfor %}");
  absl::StatusOr<TextSampleEncoder> encoder = TextSampleEncoder::FromDirectory(model.Path(""));
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("s.jsonl"), R"({"messages": [{"role": "user", "content": "q"}, )"
                                          R"({"role": "assistant", "content": "a"}]})"
                                          "\n");
  const absl::StatusOr<PreparedSamples> result =
      PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("out/sft"), &*encoder);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(dir.Path("s.jsonl") +
                        ":1: \"messages\": the chat template renders no token of the assistant "
                        "messages"));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("out")));
}

TEST(ChatSamples, DeepOrDuplicatedJsonIsAnErrorNamingTheLine) {
  testing::ScratchDir model;
  MakeModel(model, "qwen2_style", "smollm2_style");
  absl::StatusOr<TextSampleEncoder> encoder = TextSampleEncoder::FromDirectory(model.Path(""));
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": )" + deep + "}",
       "column 77 opens an array or object nested more than 64 levels deep"},
      {R"({"messages": [{"role": "user", "content": )" + deep + "}]}",
       "opens an array or object nested more than 64 levels deep"},
      {R"({"text": )" + deep + "}", "opens an array or object nested more than 64 levels deep"},
      {R"({"messages": [{"role": "user", "content": "a", "content": "b"}, )"
       R"({"role": "assistant", "content": "c"}]})",
       "key \"content\" appears twice in \"messages\""},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "",)"
       R"( "tool_calls": {"name": "f"}}]})",
       "\"tool_calls\" of \"messages\"[1] is {\"name\":\"f\"}, not an array of tool calls"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],)"
       R"( "tools": "none"})",
       "\"tools\" is \"none\", not an array of tool schemas"},
  };
  for (const auto& [line, expected] : cases) {
    SCOPED_TRACE(line.substr(0, 120));
    testing::ScratchDir dir;
    testing::WriteFile(dir.Path("s.jsonl"), "{\"text\": \"fine\"}\n" + line + "\n");
    const absl::StatusOr<PreparedSamples> result =
        PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("out/sft"), &*encoder);
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(dir.Path("s.jsonl") + ":2: "));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(expected));
    EXPECT_LT(result.status().message().size(), 400u);
    EXPECT_FALSE(std::filesystem::exists(dir.Path("out")));
  }
}

}  // namespace
}  // namespace kelvin::data
