// Kelvin's chat templates against Python: the templates of tests/fixtures/chat_templates (each
// doing what a model family's template does) render byte for byte as jinja2 in transformers'
// environment rendered them, raise where it raised, and encode to apply_chat_template's ids with
// the loss mask of Kelvin's rule (or transformers' assistant mask for {% generation %} blocks), on
// the conversations tools/make_chat_template_fixture.py recorded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/io/regular_file.h"
#include "data/chat_template/chat.h"

namespace kelvin::chat_template {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/";

TEST(TemplateRenderings, EqualJinja2AndApplyChatTemplate) {
  absl::StatusOr<std::tm> date = ParseFixedDate("2026-12-07T09:30:00", "the date");
  ASSERT_TRUE(date.ok()) << date.status();
  std::map<std::string, data::Tokenizer> tokenizers;
  std::map<std::string, ModelTemplate> templates;
  std::ifstream lines(kFixtures + "chat_templates/renderings.jsonl");
  std::string line;
  int rendered = 0, raised = 0, masked = 0, refused = 0;
  std::map<std::string, int> per_template;
  while (std::getline(lines, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    absl::StatusOr<Value> ordered = ParseJson(line, 32);  // messages and tools, keys in order
    ASSERT_TRUE(ordered.ok()) << ordered.status();
    const Value& messages = *ordered->dict().Find("messages");
    const std::string name = record["template"], tokenizer_dir = record["tokenizer"];
    SCOPED_TRACE(name + ": " + record["messages"].dump().substr(0, 200));
    if (!tokenizers.contains(tokenizer_dir)) {
      absl::StatusOr<data::Tokenizer> tokenizer =
          data::Tokenizer::FromDirectory(kFixtures + "tokenizer/" + tokenizer_dir);
      ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
      tokenizers.emplace(tokenizer_dir, *std::move(tokenizer));
    }
    const data::Tokenizer& tokenizer = tokenizers.at(tokenizer_dir);
    const std::string key = name + "/" + tokenizer_dir;
    if (!templates.contains(key)) {
      absl::StatusOr<ModelTemplate> with_tokens =
          ModelTemplate::FromDirectory(kFixtures + "tokenizer/" + tokenizer_dir);
      ASSERT_TRUE(with_tokens.ok()) << with_tokens.status();
      const std::string path = kFixtures + "chat_templates/" + name + ".jinja";
      absl::StatusOr<std::string> source = io::ReadRegularFile(path, "chat template", 1 << 20);
      ASSERT_TRUE(source.ok()) << source.status();
      absl::StatusOr<ModelTemplate> model =
          ModelTemplate::FromSource(*source, path, with_tokens->special_tokens());
      ASSERT_TRUE(model.ok()) << model.status();
      templates.emplace(key, *std::move(model));
    }
    const ModelTemplate& model = templates.at(key);
    ChatOptions options;
    options.add_generation_prompt = record["add_generation_prompt"];
    options.tools = *ordered->dict().Find("tools");
    options.render.now = *date;
    ++per_template[name];
    absl::StatusOr<std::string> text = RenderChat(model, messages, options);
    if (record.contains("error")) {
      ASSERT_FALSE(text.ok());
      EXPECT_THAT(std::string(text.status().message()),
                  HasSubstr(record["error"].get<std::string>()));
      ++raised;
      continue;
    }
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, record["text"].get<std::string>());
    std::vector<int32_t> ids;
    ASSERT_TRUE(tokenizer.Encode(*text, false, ids).ok());
    EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()),
              record["ids"].get<std::vector<int64_t>>());
    ++rendered;
    if (!record.contains("loss_mask")) continue;
    absl::StatusOr<EncodedChat> encoded = EncodeChatSample(tokenizer, model, messages, options);
    if (record["loss_mask"].is_null()) {
      EXPECT_FALSE(encoded.ok());
      ++refused;
      continue;
    }
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(encoded->ids, record["ids"].get<std::vector<int64_t>>());
    const char* mask_key = record.contains("assistant_masks") ? "assistant_masks" : "loss_mask";
    EXPECT_EQ(encoded->targets, record[mask_key].get<std::vector<int64_t>>());
    ++masked;
  }
  EXPECT_EQ(per_template.size(), 7u);
  EXPECT_GT(rendered, 150);
  EXPECT_GT(masked, 80);
  EXPECT_GT(raised, 3);
  EXPECT_GT(refused, 0);
}

TEST(TemplateRenderings, EndOfTurnIdsAreTheTokensThatCloseAnAssistantTurn) {
  for (const auto& [style, expected] :
       {std::pair{"llama3_style", "<|eot_id|>"}, std::pair{"qwen2_style", "<|im_end|>"}}) {
    absl::StatusOr<data::Tokenizer> tokenizer =
        data::Tokenizer::FromDirectory(kFixtures + "tokenizer/" + style);
    absl::StatusOr<ModelTemplate> model =
        ModelTemplate::FromDirectory(kFixtures + "tokenizer/" + style);
    ASSERT_TRUE(tokenizer.ok() && model.ok());
    absl::StatusOr<std::vector<int32_t>> ids = EndOfTurnIds(*tokenizer, *model, {});
    ASSERT_TRUE(ids.ok()) << ids.status();
    const std::vector<int32_t> want = {*tokenizer->eos_id(), *tokenizer->TokenId(expected)};
    EXPECT_EQ(*ids, want) << style;
  }
}

}  // namespace
}  // namespace kelvin::chat_template
