// Text samples in prepare-data (--tokenizer): text, prompt/completion and chat lines, mixed with
// input_ids lines, read back with the ids and loss masks the tokenizer and the chat format give;
// chats rendered by the model's template equal transformers' apply_chat_template on 100 recorded
// conversations (ids and the assistant-only loss mask) for Llama-3's template and ChatML; every bad
// text line is an error naming the file, line and field, after which nothing is left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/chat_template/chat.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "data/sft/jsonl_samples.h"
#include "tests/core/io/test_files.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

const std::string kTokenizers = std::string(KELVIN_FIXTURES_DIR) + "/tokenizer/";

TextSampleEncoder LoadEncoder(const std::string& style) {
  absl::StatusOr<TextSampleEncoder> encoder = TextSampleEncoder::FromDirectory(kTokenizers + style);
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  return *std::move(encoder);
}

std::vector<int64_t> Document(const TokenCorpus& corpus, int64_t d) {
  const int64_t end =
      d + 1 < corpus.num_documents() ? corpus.document_start(d + 1) : corpus.num_tokens();
  std::vector<int64_t> tokens(static_cast<size_t>(end - corpus.document_start(d)));
  corpus.Read(corpus.document_start(d), tokens);
  return tokens;
}

std::vector<int64_t> Ids(const Tokenizer& tokenizer, const std::string& text, bool special) {
  std::vector<int32_t> ids;
  EXPECT_TRUE(tokenizer.Encode(text, special, ids).ok());
  return {ids.begin(), ids.end()};
}

TEST(TextSamples, TextPromptChatAndInputIdsLinesReadBack) {
  const TextSampleEncoder encoder = LoadEncoder("llama3_style");
  const Tokenizer& tokenizer = encoder.tokenizer();
  testing::ScratchDir dir;
  testing::WriteFile(
      dir.Path("s.jsonl"),
      R"({"text": "Hello world.\nSecond line", "source": "web"})"
      "\n"
      R"({"prompt": "Q: one plus one?", "completion": " Two."})"
      "\n"
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! "}]})"
      "\n"
      R"({"input_ids": [5, 6, 7]})"
      "\n");
  absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("sft"), &encoder);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->samples, 4);
  EXPECT_EQ(prepared->ignored_keys, (std::map<std::string, int64_t>{{"source", 1}}));
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(dir.Path("sft"));
  absl::StatusOr<TokenCorpus> mask = OpenMegatronDataset(dir.Path("sft_loss_mask"));
  ASSERT_TRUE(corpus.ok() && mask.ok());
  ASSERT_EQ(corpus->num_documents(), 4);
  const int64_t eos = *tokenizer.eos_id();

  std::vector<int64_t> text = Ids(tokenizer, "Hello world.\nSecond line", true);
  EXPECT_EQ(text.front(), *tokenizer.bos_id());
  text.push_back(eos);
  EXPECT_EQ(Document(*corpus, 0), text);
  EXPECT_EQ(Document(*mask, 0), std::vector<int64_t>(text.size(), 1));

  std::vector<int64_t> prompt = Ids(tokenizer, "Q: one plus one?", true);
  const std::vector<int64_t> completion = Ids(tokenizer, " Two.", false);
  std::vector<int64_t> targets(prompt.size(), 0);
  prompt.insert(prompt.end(), completion.begin(), completion.end());
  prompt.push_back(eos);
  targets.resize(prompt.size(), 1);
  EXPECT_EQ(Document(*corpus, 1), prompt);
  EXPECT_EQ(Document(*mask, 1), targets);

  absl::StatusOr<chat_template::ModelTemplate> model =
      chat_template::ModelTemplate::FromDirectory(kTokenizers + "llama3_style");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<chat_template::EncodedChat> encoded = chat_template::EncodeChatSample(
      tokenizer, *model,
      *chat_template::ParseJson(R"([{"role": "system", "content": "Be brief."}, )"
                                R"({"role": "user", "content": "Hi"}, )"
                                R"({"role": "assistant", "content": " Hello! "}])",
                                4),
      {});
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const std::vector<int64_t>& chat = encoded->ids;
  const std::vector<int64_t>& chat_targets = encoded->targets;
  EXPECT_EQ(Document(*corpus, 2), chat);
  EXPECT_EQ(Document(*mask, 2), chat_targets);
  // The assistant's trimmed content and <|eot_id|> train: "Hello! " trimmed to "Hello!".
  const std::vector<int64_t> answer = Ids(tokenizer, "Hello!", false);
  EXPECT_EQ(std::count(chat_targets.begin(), chat_targets.end(), 1),
            static_cast<int64_t>(answer.size()) + 1);
  EXPECT_EQ(chat.back(), *tokenizer.TokenId("<|eot_id|>"));

  EXPECT_EQ(Document(*corpus, 3), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(Document(*mask, 3), (std::vector<int64_t>{1, 1, 1}));
}

class ChatParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatParity, IdsAndLossMaskEqualApplyChatTemplate) {
  const TextSampleEncoder encoder = LoadEncoder(GetParam());
  absl::StatusOr<chat_template::ModelTemplate> model =
      chat_template::ModelTemplate::FromDirectory(kTokenizers + GetParam());
  ASSERT_TRUE(model.ok()) << model.status();
  std::ifstream cases(kTokenizers + "chat_cases.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(cases, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    absl::StatusOr<chat_template::Value> messages =
        chat_template::ParseJson(record["messages"].dump(), 4);
    ASSERT_TRUE(messages.ok()) << messages.status();
    absl::StatusOr<chat_template::EncodedChat> encoded =
        chat_template::EncodeChatSample(encoder.tokenizer(), *model, *messages, {});
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    const std::vector<int64_t>& ids = encoded->ids;
    const std::vector<int64_t>& targets = encoded->targets;
    EXPECT_EQ(ids, record[GetParam()]["ids"].get<std::vector<int64_t>>()) << "case " << checked;
    EXPECT_EQ(targets, record[GetParam()]["loss_mask"].get<std::vector<int64_t>>())
        << "case " << checked;
    ++checked;
  }
  EXPECT_EQ(checked, 100);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatParity,
                         ::testing::Values("llama3_style", "gpt2_style", "qwen2_style"));

TEST(TextSamples, BadTextLinesAreErrorsNamingTheLineAndField) {
  const TextSampleEncoder encoder = LoadEncoder("llama3_style");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"text": 5})", "\"text\" of the sample is 5, not a string"},
      {R"({"text": ""})", "\"text\" of the sample is empty"},
      {R"({"prompt": "a"})", "no \"completion\" in a prompt sample"},
      {R"({"prompt": "a", "completion": null})", "\"completion\" of a prompt sample is null"},
      {R"({"messages": []})", "\"messages\" is [], not a non-empty array"},
      {R"({"messages": "hi"})", "\"messages\" is \"hi\", not a non-empty array"},
      {R"({"messages": [5]})", "\"messages\"[0] is 5, not an object"},
      {R"({"messages": [{"content": "x"}]})", "no \"role\" in \"messages\"[0]"},
      {R"({"messages": [{"role": "bot", "content": "x"}]})",
       "\"role\" of \"messages\"[0] is \"bot\": use system, user, assistant or tool"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant"}]})",
       "no \"content\" in \"messages\"[1]"},
      {R"({"messages": [{"role": "user", "content": ["a"]}]})",
       "\"content\" of \"messages\"[0] is [\"a\"], not a string"},
      {R"({"messages": [{"role": "assistant", "content": ""}]})",
       "\"content\" of \"messages\"[0] is empty"},
      {R"({"messages": [{"role": "user", "content": "hi"}]})", "has no assistant message"},
      {R"({"text": "a", "prompt": "b", "completion": "c"})", "mixes sample kinds"},
      {R"({"content": "a"})", "no \"text\", \"prompt\", \"messages\" or \"input_ids\""},
      {"{\"text\": \"bad \xff byte\"}", "not valid JSON"},
      // A key twice is refused on every line kind (nlohmann alone keeps the last value).
      {R"({"text": "a", "text": "b"})", "key \"text\" appears twice"},
      {R"({"prompt": "a", "completion": "b", "completion": "c"})",
       "key \"completion\" appears twice"},
      {R"({"messages": [{"role": "user", "content": "q"}, )"
       R"({"role": "assistant", "content": "a", "content": "b"}]})",
       "key \"content\" appears twice in \"messages\""},
  };
  for (const auto& [line, expected] : cases) {
    SCOPED_TRACE(line);
    testing::ScratchDir dir;
    testing::WriteFile(dir.Path("s.jsonl"), "{\"text\": \"fine\"}\n" + line + "\n");
    const absl::StatusOr<PreparedSamples> result =
        PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("out/sft"), &encoder);
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(dir.Path("s.jsonl") + ":2: "));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(expected));
    EXPECT_FALSE(std::filesystem::exists(dir.Path("out")));
  }
}

TEST(TextSamples, ChatNeedsAChatTemplateAndTextNeedsAnEosToken) {
  const TextSampleEncoder encoder = LoadEncoder("llama3_style");
  testing::ScratchDir dir;
  std::filesystem::copy_file(kTokenizers + "gpt2_style/tokenizer.json", dir.Path("tokenizer.json"));
  testing::WriteFile(dir.Path("tokenizer_config.json"), "{}");
  EXPECT_THAT(std::string(TextSampleEncoder::FromDirectory(dir.Path("")).status().message()),
              HasSubstr("names no eos_token, which prepare-data appends"));
  testing::WriteFile(dir.Path("tokenizer_config.json"), R"({"eos_token": "<|nope|>"})");
  EXPECT_THAT(std::string(TextSampleEncoder::FromDirectory(dir.Path("")).status().message()),
              HasSubstr("eos_token \"<|nope|>\" is no token of"));
  testing::WriteFile(dir.Path("tokenizer_config.json"), "[]");  // not the object it must be
  EXPECT_THAT(std::string(TextSampleEncoder::FromDirectory(dir.Path("")).status().message()),
              HasSubstr("tokenizer_config.json is [], expected an object"));
}

TEST(TextSamples, AFiftyMegabyteDocumentIsOneSample) {
  const TextSampleEncoder encoder = LoadEncoder("gpt2_style");
  std::string text;
  while (text.size() < (size_t{50} << 20)) text += "The quick brown fox jumps over 13 lazy dogs. ";
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("s.jsonl"), nlohmann::json{{"text", text}}.dump() + "\n");
  absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("sft"), &encoder);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->samples, 1);
  EXPECT_GT(prepared->tokens, static_cast<int64_t>(text.size() / 8));
}

}  // namespace
}  // namespace kelvin::data
