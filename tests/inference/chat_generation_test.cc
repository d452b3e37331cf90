// kelvin generate --chat with the Qwen2-style test tokenizer and the SmolLM2-style template (a
// default system prompt): the prompt ids are the template's rendering with the generation prompt
// (as the renderer gives them and as apply_chat_template recorded them), a reply ends at the
// template's end of turn (<|im_end|>) and prints without it, a conversation on standard input
// carries each reply into the next turn, --system goes first (and not beside a system message of
// the conversation), and bad files, lines and templates are errors naming them.
#include "inference/chat_generation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/atomic_file.h"
#include "data/chat_template/chat.h"
#include "data/chat_template/model_template.h"
#include "launcher/commands/inference_options.h"
#include "models/llama/llama_model.h"
#include "tests/models/tiny_ssa_llama.h"

namespace kelvin::inference {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kQwenTokenizer[] = KELVIN_FIXTURES_DIR "/tokenizer/qwen2_style";  // 3075 ids
constexpr char kNoTemplateTokenizer[] = KELVIN_FIXTURES_DIR "/tokenizer/smollm_style";
constexpr int32_t kNewline = 198, kImEnd = 3074;
// "Hi there" in the Qwen2-style tokenizer: the reply the test model gives to every prompt.
const std::vector<int32_t> kReply = {39, 72, 2254, 1171};

// The Qwen2-style tokenizer with the SmolLM2-style template beside it, the pair the recorded
// renderings use.
std::string ChatTokenizer() {
  static const std::string directory = [] {
    const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_chat_tokenizer";
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(kQwenTokenizer) / file, dir / file);
    }
    fs::copy_file(KELVIN_FIXTURES_DIR "/chat_templates/smollm2_style.jinja",
                  dir / "chat_template.jinja");
    return dir.string();
  }();
  return directory;
}

// A tiny model of the tokenizer's 3075 ids (512 positions) whose greedy continuation of "\n" is
// kReply then <|im_end|>, and after <|im_end|> kReply again: every layer's output projections are
// zero, so a position's logits depend on its own token alone, and the embeddings and LM head make
// each token of that chain pick the next (token chain[j] is the unit vector j, and the LM head row
// of chain[j + 1] reads dimension j).
std::string ReplyingModel() {
  static const std::string directory = [] {
    models::LlamaConfig config = testing::TinySsaLlamaConfig(true, true);
    config.vocab_size = 3075;
    config.max_position_embeddings = 512;
    models::LlamaModel model(config, DType::kF32);
    model.InitRandom(5);
    ParameterSet& parameters = model.parameters();
    for (int64_t l = 0; l < config.num_layers; ++l) {
      for (const char* suffix : {"self_attn.o_proj.weight", "mlp.down_proj.weight"}) {
        const std::string name = absl::StrCat("model.layers.", l, ".", suffix);
        Tensor zero = parameters.MasterOnHost(name);
        std::fill_n(zero.data<float>(), zero.numel(), 0.0f);
        parameters.Assign(name, zero);
      }
    }
    std::vector<int32_t> chain = {kNewline};
    chain.insert(chain.end(), kReply.begin(), kReply.end());
    chain.push_back(kImEnd);
    chain.push_back(kReply.front());
    const int64_t d = config.hidden_size;
    Tensor embedding = parameters.MasterOnHost("model.embed_tokens.weight");  // [V, D]
    Tensor head = parameters.MasterOnHost("lm_head.weight");                  // [V, D]
    std::fill_n(head.data<float>(), head.numel(), 0.0f);
    for (size_t j = 0; j + 1 < chain.size(); ++j) {
      float* row = embedding.data<float>() + chain[j] * d;
      std::fill_n(row, d, 0.0f);
      row[j] = 1.0f;
      head.data<float>()[chain[j + 1] * d + static_cast<int64_t>(j)] = 10.0f;
    }
    parameters.Assign("model.embed_tokens.weight", embedding);
    parameters.Assign("lm_head.weight", head);
    const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_chat_replying_model";
    fs::remove_all(dir);
    EXPECT_TRUE(model.ExportHf(dir.string()).ok());
    return dir.string();
  }();
  return directory;
}

GenerateOptions ChatGeneration(int64_t max_new_tokens = 8) {
  GenerateOptions options;
  options.tokenizer = ChatTokenizer();
  options.max_new_tokens = max_new_tokens;
  return options;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = (fs::path(::testing::TempDir()) / name).string();
  EXPECT_TRUE(io::WriteFileAtomically(path, {text}).ok());
  return path;
}

// The JSON lines of the conversations of `path`.
absl::StatusOr<std::vector<nlohmann::json>> Chat(const std::string& path,
                                                 const GenerateOptions& generation,
                                                 const ChatModeOptions& chat = {}) {
  KELVIN_ASSIGN_OR_RETURN(const std::vector<Conversation> conversations, ReadConversations(path));
  KELVIN_ASSIGN_OR_RETURN(const std::vector<std::string> lines,
                          GenerateChatsFromJob(launcher::JobOfModelDirectory(ReplyingModel()),
                                               conversations, generation, chat));
  std::vector<nlohmann::json> parsed;
  for (const std::string& line : lines) parsed.push_back(nlohmann::json::parse(line));
  return parsed;
}

// The ids of `messages` (a JSON array) rendered by the template with the generation prompt.
std::vector<int32_t> RenderedIds(const nlohmann::json& messages) {
  const absl::StatusOr<chat_template::ModelTemplate> model =
      chat_template::ModelTemplate::FromDirectory(ChatTokenizer());
  const absl::StatusOr<chat_template::Value> value = chat_template::ParseJson(messages.dump(), 8);
  const absl::StatusOr<data::Tokenizer> tokenizer = data::Tokenizer::FromDirectory(ChatTokenizer());
  EXPECT_TRUE(model.ok() && value.ok() && tokenizer.ok());
  chat_template::ChatOptions options;
  options.add_generation_prompt = true;
  const absl::StatusOr<std::string> text = chat_template::RenderChat(*model, *value, options);
  EXPECT_TRUE(text.ok()) << text.status();
  std::vector<int32_t> ids;
  EXPECT_TRUE(tokenizer->Encode(text.value_or(""), false, ids).ok());
  return ids;
}

nlohmann::json Message(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// Every recorded rendering of the pair with the generation prompt and without tools, default
// system prompt and given ones: the prompt is apply_chat_template(add_generation_prompt=True)'s
// ids, and the renderer's.
TEST(GenerateChat, PromptsAreTheTemplatesRenderingWithTheGenerationPrompt) {
  std::ifstream recorded(KELVIN_FIXTURES_DIR "/chat_templates/renderings.jsonl");
  std::string text, line;
  std::vector<std::vector<int32_t>> expected;
  while (std::getline(recorded, line)) {
    const nlohmann::ordered_json rendering = nlohmann::ordered_json::parse(line);
    if (rendering["template"] != "smollm2_style" ||
        !rendering["add_generation_prompt"].get<bool>() || !rendering["tools"].is_null() ||
        rendering["messages"].back()["role"] == "assistant") {
      continue;
    }
    text += nlohmann::ordered_json{{"messages", rendering["messages"]}}.dump() + "\n";
    expected.push_back(rendering["ids"].get<std::vector<int32_t>>());
  }
  ASSERT_GE(expected.size(), 8u);
  const std::string path = WriteFile("kelvin_chat_recorded.jsonl", text);
  const absl::StatusOr<std::vector<nlohmann::json>> lines = Chat(path, ChatGeneration(2));
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), expected.size());
  int64_t default_system_prompts = 0;
  for (size_t c = 0; c < expected.size(); ++c) {
    const nlohmann::json& chat = (*lines)[c];
    EXPECT_EQ(chat["prompt_tokens"].get<std::vector<int32_t>>(), expected[c]) << c;
    EXPECT_EQ(chat["prompt_tokens"].get<std::vector<int32_t>>(), RenderedIds(chat["messages"]))
        << c;
    default_system_prompts += chat["messages"][0]["role"] == "user";
  }
  EXPECT_GT(default_system_prompts, 0);  // the template's own system prompt is in the ids
}

// The model's reply to any prompt is "Hi there<|im_end|>" and it goes on after <|im_end|>: the
// chat stops there (finish_reason "eos") and its text leaves the end of turn out, where plain
// generation of the same ids runs on to its budget.
TEST(GenerateChat, AReplyEndsAtTheTemplatesEndOfTurn) {
  const std::string path = WriteFile("kelvin_chat_hello.jsonl",
                                     R"({"messages": [{"role": "user", "content": "Hello"}]})");
  const absl::StatusOr<std::vector<nlohmann::json>> lines = Chat(path, ChatGeneration());
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 1u);
  const nlohmann::json& chat = lines->front();
  std::vector<int32_t> reply = kReply;
  reply.push_back(kImEnd);
  EXPECT_EQ(chat["tokens"].get<std::vector<int32_t>>(), reply);
  EXPECT_EQ(chat["finish_reason"], "eos");
  EXPECT_EQ(chat["text"], "Hi there");
  EXPECT_EQ(chat["messages"], nlohmann::json::array({Message("user", "Hello")}));

  GenerateOptions plain = ChatGeneration();
  plain.token_prompts = {chat["prompt_tokens"].get<std::vector<int32_t>>()};
  const absl::StatusOr<std::vector<std::string>> free_run =
      GenerateFromJob(launcher::JobOfModelDirectory(ReplyingModel()), plain);
  ASSERT_TRUE(free_run.ok()) << free_run.status();
  const nlohmann::json run = nlohmann::json::parse(free_run->front());
  EXPECT_EQ(run["finish_reason"], "length");
  const std::vector<int32_t> tokens = run["tokens"];
  ASSERT_EQ(tokens.size(), 8u);
  EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + 5), reply);
}

// Two user lines (a blank one between, skipped): each reply is printed, and the second turn's
// prompt is the first prompt, the first reply with its <|im_end|> and the template's "\n" after
// it, then the new user turn.
TEST(GenerateChat, StandardInputCarriesEachReplyIntoTheNextTurn) {
  const std::vector<std::string> typed = {"Hello", "  ", "And again?\r"};
  for (const bool json : {false, true}) {
    size_t next = 0;
    std::vector<std::string> printed;
    const absl::Status chatted = ChatInteractively(
        launcher::JobOfModelDirectory(ReplyingModel()), ChatGeneration(),
        {.system = "", .json = json},
        [&]() -> absl::StatusOr<std::optional<std::string>> {
          if (next == typed.size()) return std::nullopt;
          return typed[next++];
        },
        [&](const std::string& reply) { printed.push_back(reply); });
    ASSERT_TRUE(chatted.ok()) << chatted;
    ASSERT_EQ(printed.size(), 2u);
    if (!json) {
      EXPECT_EQ(printed, (std::vector<std::string>{"Hi there", "Hi there"}));
      continue;
    }
    const nlohmann::json first = nlohmann::json::parse(printed[0]);
    const nlohmann::json second = nlohmann::json::parse(printed[1]);
    EXPECT_EQ(second["messages"],
              nlohmann::json::array({Message("user", "Hello"), Message("assistant", "Hi there"),
                                     Message("user", "And again?")}));
    std::vector<int32_t> carried = first["prompt_tokens"];
    for (const int32_t id : first["tokens"]) carried.push_back(id);
    carried.push_back(kNewline);
    const std::vector<int32_t> prompt = second["prompt_tokens"];
    ASSERT_GT(prompt.size(), carried.size());
    EXPECT_EQ(std::vector<int32_t>(prompt.begin(), prompt.begin() + carried.size()), carried);
    EXPECT_EQ(prompt, RenderedIds(second["messages"]));
  }
}

// --system replaces the template's default system prompt as the first message; a conversation
// that has a system message of its own is then an error naming its line.
TEST(GenerateChat, SystemGoesFirstAndNotBesideTheConversationsOwn) {
  const std::string path = WriteFile("kelvin_chat_system.jsonl",
                                     R"({"messages": [{"role": "user", "content": "Hello"}]})");
  const absl::StatusOr<std::vector<nlohmann::json>> lines =
      Chat(path, ChatGeneration(2), {.system = "Be brief.", .json = false});
  ASSERT_TRUE(lines.ok()) << lines.status();
  const nlohmann::json& chat = lines->front();
  const nlohmann::json messages =
      nlohmann::json::array({Message("system", "Be brief."), Message("user", "Hello")});
  EXPECT_EQ(chat["messages"], messages);
  EXPECT_EQ(chat["prompt_tokens"].get<std::vector<int32_t>>(), RenderedIds(messages));
  const absl::StatusOr<std::vector<nlohmann::json>> default_prompt = Chat(path, ChatGeneration(2));
  ASSERT_TRUE(default_prompt.ok());
  EXPECT_NE(default_prompt->front()["prompt_tokens"], chat["prompt_tokens"]);

  const std::string both =
      WriteFile("kelvin_chat_two_systems.jsonl",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n"
                "{\"messages\": [{\"role\": \"system\", \"content\": \"Be long.\"}, "
                "{\"role\": \"user\", \"content\": \"Hi\"}]}\n");
  EXPECT_EQ(
      Chat(both, ChatGeneration(2), {.system = "Be brief.", .json = false}).status().message(),
      both +
          ":2: the conversation has a system message and --system gives another: drop "
          "one of them");
}

// Bad lines name the file, line and field (prepare-data's rules, and a conversation that already
// ends with the assistant's turn); no conversation at all, a model directory without a chat
// template and a conversation beyond the model's positions are errors that say what to do.
TEST(GenerateChat, ErrorsNameTheLineTheFieldAndWhatToDo) {
  const std::string good = R"({"messages": [{"role": "user", "content": "Hello"}]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [{"role": "user"}]})", ":3: no \"content\" in \"messages\"[0]"},
      {R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": 1}]})",
       ":3: \"content\" of \"messages\"[1] is 1, not a string"},
      {R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})",
       ":3: \"messages\"[1] is the assistant's: generation writes the assistant's next turn"},
      {R"({"messages": [{"role": "robot", "content": "Hi"}]})",
       ":3: \"role\" of \"messages\"[0] is \"robot\": use system, user, assistant or tool"},
      {R"({"prompt": "Hi"})", ":3: the object has no \"messages\": each line of a conversations"},
      {R"({"messages": [)", ":3: not well-formed JSON at line 1"},
      {std::string("{\"messages\": \0}", 15), ":3: column 14 is a NUL byte"},
  };
  for (const auto& [bad, message] : cases) {
    const std::string path = WriteFile("kelvin_chat_bad.jsonl", good + "\n\n" + bad + "\n");
    EXPECT_THAT(std::string(ReadConversations(path).status().message()), StartsWith(path + message))
        << bad;
  }
  const std::string blank = WriteFile("kelvin_chat_blank.jsonl", "\n  \n");
  EXPECT_THAT(std::string(ReadConversations(blank).status().message()),
              HasSubstr("has no conversation (no non-blank line)"));

  const std::string path = WriteFile("kelvin_chat_good.jsonl", good);
  GenerateOptions no_template = ChatGeneration();
  no_template.tokenizer = kNoTemplateTokenizer;
  EXPECT_THAT(std::string(Chat(path, no_template).status().message()),
              ::testing::AllOf(StartsWith(absl::StrCat("--tokenizer ", kNoTemplateTokenizer,
                                                       " has no chat template")),
                               HasSubstr("pass --tokenizer DIR of a model that has one")));
  EXPECT_THAT(std::string(Chat(path, ChatGeneration(500)).status().message()),
              ::testing::MatchesRegex(path + ":1: the conversation renders to [0-9]+ tokens, "
                                             "which with 500 new tokens .--max-new-tokens. exceed "
                                             "the model's 512 positions: .*"));
}

}  // namespace
}  // namespace kelvin::inference
