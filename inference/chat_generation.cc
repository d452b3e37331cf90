// Chats rendered by the model's template, generated and continued (see chat_generation.h).
#include "inference/chat_generation.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/io/regular_file.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "data/chat_template/chat.h"
#include "data/chat_template/model_template.h"
#include "data/tokenizer/utf8.h"
#include "inference/forward_model.h"
#include "training/job/job_setup.h"

namespace kelvin::inference {
namespace {

using chat_template::Dict;
using chat_template::List;
using chat_template::Value;

// A conversations file is read whole: at most this size.
constexpr uint64_t kMaxConversationsFileBytes = uint64_t{1} << 30;
// One line typed or piped on standard input: at most this size.
constexpr int64_t kMaxUserLineBytes = int64_t{16} << 20;

Value Message(const char* role, std::string content) {
  Dict message;
  message.Set("role", Value::String(role));
  message.Set("content", Value::String(std::move(content)));
  return Value::FromDict(std::move(message));
}

bool HasRole(const Value& message, std::string_view role) {
  const Value* found = message.is_dict() ? message.dict().Find("role") : nullptr;
  return found != nullptr && found->is_string() && found->str() == role;
}

// What every turn of a chat uses: the tokenizer, the model's chat template and its end-of-turn
// ids, then (LoadModel) the model and the request each prompt starts from, which stops at those
// ids too. Not movable: the request reads the options and tokenizer it holds.
class ChatGenerator {
 public:
  // Everything but the model, so that a conversation's problems show before it loads.
  static absl::StatusOr<std::unique_ptr<ChatGenerator>> Load(const config::JobConfig& job,
                                                             const GenerateOptions& generation,
                                                             const ChatModeOptions& chat) {
    KELVIN_RETURN_IF_ERROR(CheckGenerateOptions(generation));
    std::unique_ptr<ChatGenerator> generator(new ChatGenerator(generation, chat));
    KELVIN_ASSIGN_OR_RETURN(generator->tokenizer_,
                            LoadModelTokenizer(job, generation.tokenizer, "--chat conversations",
                                               "generate token ids with --tokens"));
    const bool given = !generation.tokenizer.empty();
    const std::string directory = given ? generation.tokenizer : job.model().hf_dir();
    absl::StatusOr<chat_template::ModelTemplate> found =
        chat_template::ModelTemplate::FromDirectory(directory);
    if (absl::IsNotFound(found.status())) {
      return absl::FailedPreconditionError(absl::StrCat(
          given ? "--tokenizer " : "model.hf_dir=", found.status().message(),
          ": --chat renders the model's own chat template; pass --tokenizer DIR of a model that "
          "has one"));
    }
    KELVIN_RETURN_IF_ERROR(found.status());
    generator->template_ = *std::move(found);
    KELVIN_ASSIGN_OR_RETURN(
        generator->end_of_turn_,
        chat_template::EndOfTurnIds(*generator->tokenizer_, *generator->template_, {}));
    KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch,
                            training::ResolveModelArchitecture(job.model()));
    generator->positions_ = arch.PositionLimit();
    return generator;
  }

  // The model placed as `placement` says (`tp`: the group it is split over), and the request.
  absl::Status LoadModel(const config::JobConfig& job, const training::TrainingPlacement& placement,
                         parallel::Communicator* tp) {
    KELVIN_ASSIGN_OR_RETURN(model_, LoadInferenceModel(job, generation_.checkpoint, placement, tp));
    base_ = BaseRequest(generation_, model_->config(), tokenizer_);
    std::vector<std::string> shown;
    for (const int32_t id : end_of_turn_) {
      base_.stop_ids.push_back(id);
      const absl::StatusOr<std::string> text = tokenizer_->Decode({id}, false);
      shown.push_back(absl::StrCat(id, text.ok() ? absl::StrCat(" ", *text) : ""));
    }
    KLOG_RANK0(INFO) << "--chat: the chat template of " << template_->source()
                     << "; a reply ends at its end-of-turn ids (" << absl::StrJoin(shown, ", ")
                     << "), an eos id or --max-new-tokens";
    return absl::OkStatus();
  }

  // `messages` with --system's message first; a conversation with a system message of its own
  // is then an error naming `source`.
  absl::StatusOr<Value> WithSystem(const Value& messages, const std::string& source) const {
    if (chat_.system.empty()) return messages;
    List with_system = {Message("system", chat_.system)};
    for (const Value& message : messages.list()) {
      if (HasRole(message, "system")) {
        return absl::InvalidArgumentError(absl::StrCat(
            source,
            ": the conversation has a system message and --system gives another: drop one of "
            "them"));
      }
      with_system.push_back(message);
    }
    return Value::FromList(std::move(with_system));
  }

  // The prompt of `messages`: rendered with the generation prompt and encoded as
  // apply_chat_template encodes it (no special tokens added); it and the new tokens must fit the
  // model's positions. Errors name `source`.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const Value& messages, const Value& tools,
                                                 const std::string& source) const {
    chat_template::ChatOptions options;
    options.add_generation_prompt = true;
    options.tools = tools;
    const auto named = [&source](const absl::Status& status) {
      return absl::Status(status.code(), absl::StrCat(source, ": ", status.message()));
    };
    const absl::StatusOr<std::string> text = RenderChat(*template_, messages, options);
    if (!text.ok()) return named(text.status());
    std::vector<int32_t> ids;
    if (const absl::Status encoded = tokenizer_->Encode(*text, false, ids); !encoded.ok()) {
      return named(encoded);
    }
    if (static_cast<int64_t>(ids.size()) > positions_ - generation_.max_new_tokens + 1) {
      return absl::OutOfRangeError(absl::StrCat(
          source, ": the conversation renders to ", ids.size(), " tokens, which with ",
          generation_.max_new_tokens, " new tokens (--max-new-tokens) exceed the model's ",
          positions_, " positions: shorten the conversation or give fewer new tokens"));
    }
    return ids;
  }

  absl::StatusOr<std::vector<GenerationResult>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, GenerationTiming* timing) const {
    return GeneratePrompts(*model_, prompts, base_, generation_.batch_size, timing);
  }

  // {"messages": `messages`, then GenerationJson's fields, the text without the end of turn}.
  absl::StatusOr<nlohmann::ordered_json> Json(const Value& messages,
                                              const std::vector<int32_t>& prompt,
                                              const GenerationResult& result,
                                              int64_t* failed) const {
    KELVIN_ASSIGN_OR_RETURN(const std::string text,
                            chat_template::ToJson(messages, -1, false, ", ", ": "));
    nlohmann::ordered_json line = {{"messages", nlohmann::ordered_json::parse(text)}};
    const nlohmann::ordered_json generated =
        GenerationJson(prompt, result, tokenizer_, true, generation_.logprobs, failed);
    for (const auto& [key, value] : generated.items()) line[key] = value;
    return line;
  }

 private:
  ChatGenerator(const GenerateOptions& generation, const ChatModeOptions& chat)
      : generation_(generation), chat_(chat) {}

  const GenerateOptions generation_;
  const ChatModeOptions chat_;
  std::optional<data::Tokenizer> tokenizer_;
  std::optional<chat_template::ModelTemplate> template_;
  std::vector<int32_t> end_of_turn_;
  int64_t positions_ = 0;  // the model's position limit (LlamaConfig::PositionLimit)
  std::unique_ptr<models::LlamaModel> model_;
  GenerationRequest base_;  // reads generation_ and tokenizer_
};

}  // namespace

absl::StatusOr<std::vector<Conversation>> ReadConversations(const std::string& path) {
  KELVIN_ASSIGN_OR_RETURN(
      const std::string text,
      io::ReadRegularFile(path, "conversations file (--chat)", kMaxConversationsFileBytes));
  std::vector<Conversation> conversations;
  std::map<std::string, int64_t> ignored;  // key -> lines that have it
  int64_t number = 0;                      // of the line, from 1
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::ConsumeSuffix(&line, "\r");  // a CRLF line end
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<std::string> keys;
    KELVIN_ASSIGN_OR_RETURN(
        data::ChatMessages chat,
        data::ParseChatLine(std::string_view(line.data(), line.size()), path, number, keys));
    for (const std::string& key : keys) ++ignored[key];
    conversations.push_back({std::move(chat), absl::StrCat(path, ":", number)});
  }
  if (conversations.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the conversations file '", path,
        "' has no conversation (no non-blank line): give one {\"messages\": [...]} per line"));
  }
  if (!ignored.empty()) {
    std::vector<std::string> listed;
    for (const auto& [key, lines] : ignored) {
      if (listed.size() == 10) break;
      listed.push_back(
          absl::StrCat("\"", absl::Utf8SafeCEscape(key.substr(0, 64)), "\" (", lines, " lines)"));
    }
    KLOG_RANK0(WARNING) << path << ": ignored keys (only \"messages\" and \"tools\" reach the "
                        << "template): " << absl::StrJoin(listed, ", ")
                        << (ignored.size() > listed.size() ? ", ..." : "");
  }
  return conversations;
}

absl::StatusOr<std::vector<std::string>> GenerateChatsFromJob(
    const config::JobConfig& job, const std::vector<Conversation>& conversations,
    const GenerateOptions& generation, const ChatModeOptions& chat,
    const training::TrainingPlacement& placement, GenerationTiming* timing,
    parallel::Communicator* tp, int64_t* failed) {
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<ChatGenerator> generator,
                          ChatGenerator::Load(job, generation, chat));
  std::vector<Value> messages;                // [conversations]
  std::vector<std::vector<int32_t>> prompts;  // [conversations]
  for (const Conversation& conversation : conversations) {
    KELVIN_ASSIGN_OR_RETURN(Value conversation_messages,
                            generator->WithSystem(conversation.chat.messages, conversation.source));
    KELVIN_ASSIGN_OR_RETURN(
        std::vector<int32_t> prompt,
        generator->PromptIds(conversation_messages, conversation.chat.tools, conversation.source));
    messages.push_back(std::move(conversation_messages));
    prompts.push_back(std::move(prompt));
  }
  KELVIN_RETURN_IF_ERROR(generator->LoadModel(job, placement, tp));
  KELVIN_ASSIGN_OR_RETURN(const std::vector<GenerationResult> results,
                          generator->Generate(prompts, timing));
  std::vector<std::string> lines;
  for (size_t c = 0; c < results.size(); ++c) {
    KELVIN_ASSIGN_OR_RETURN(const nlohmann::ordered_json line,
                            generator->Json(messages[c], prompts[c], results[c], failed));
    lines.push_back(JsonLine(line));
  }
  return lines;
}

absl::Status ChatInteractively(const config::JobConfig& job, const GenerateOptions& generation,
                               const ChatModeOptions& chat, const NextUserLine& next_line,
                               const std::function<void(const std::string&)>& print,
                               const training::TrainingPlacement& placement,
                               GenerationTiming* timing, parallel::Communicator* tp) {
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<ChatGenerator> generator,
                          ChatGenerator::Load(job, generation, chat));
  KELVIN_RETURN_IF_ERROR(generator->LoadModel(job, placement, tp));
  KELVIN_ASSIGN_OR_RETURN(Value messages,
                          generator->WithSystem(Value::FromList({}), "standard input"));
  for (int64_t number = 1;; ++number) {
    KELVIN_ASSIGN_OR_RETURN(std::optional<std::string> line, next_line());
    if (!line.has_value()) return absl::OkStatus();
    if (line->ends_with('\r')) line->pop_back();  // a CRLF line end
    if (absl::StripAsciiWhitespace(*line).empty()) continue;
    const std::string source = absl::StrCat("standard input line ", number);
    if (const std::optional<size_t> bad = data::FirstInvalidUtf8(*line)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the text is not valid UTF-8 at byte ", *bad, "; type or pipe UTF-8 text"));
    }
    List turns = messages.list();
    turns.push_back(Message("user", *std::move(line)));
    messages = Value::FromList(std::move(turns));
    KELVIN_ASSIGN_OR_RETURN(const std::vector<int32_t> prompt,
                            generator->PromptIds(messages, Value::None(), source));
    KELVIN_ASSIGN_OR_RETURN(const std::vector<GenerationResult> results,
                            generator->Generate({prompt}, timing));
    KELVIN_ASSIGN_OR_RETURN(const nlohmann::ordered_json reply,
                            generator->Json(messages, prompt, results.front(), nullptr));
    if (!reply.contains("text")) {  // an unspellable id drawn with --allow-unspellable
      return absl::DataLossError(absl::StrCat(source, ": the reply has no text (",
                                              reply["error"].get<std::string>(),
                                              "), so the conversation cannot go on"));
    }
    const std::string text = reply["text"];
    print(chat.json ? JsonLine(reply) : text);
    turns = messages.list();
    turns.push_back(Message("assistant", text));
    messages = Value::FromList(std::move(turns));
  }
}

NextUserLine StandardInputLines(parallel::Communicator& tp) {
  return [&tp]() -> absl::StatusOr<std::optional<std::string>> {
    constexpr int64_t kEnd = -1, kTooLong = -2;  // what rank 0 sends in place of a length
    std::string line;
    Tensor header = Tensor::ZerosCpu({1}, DType::kI64);  // [1] the line's length, or kEnd/kTooLong
    if (tp.rank() == 0) {
      if (isatty(STDIN_FILENO)) {
        std::fputs("> ", stderr);
        std::fflush(stderr);
      }
      int c = EOF;
      while ((c = std::getchar()) != EOF && c != '\n' &&
             static_cast<int64_t>(line.size()) <= kMaxUserLineBytes) {
        line.push_back(static_cast<char>(c));
      }
      header.data<int64_t>()[0] = static_cast<int64_t>(line.size()) > kMaxUserLineBytes ? kTooLong
                                  : c == EOF && line.empty()                            ? kEnd
                                                             : static_cast<int64_t>(line.size());
    }
    tp.Broadcast(header, 0);
    const int64_t length = header.data<int64_t>()[0];
    if (length == kEnd) return std::nullopt;
    if (length == 0) return std::string();
    if (length == kTooLong) {
      return absl::InvalidArgumentError(absl::StrCat("a line of standard input is longer than ",
                                                     kMaxUserLineBytes >> 20,
                                                     " MiB: give each user turn on one line"));
    }
    Tensor packed = Tensor::ZerosCpu({(length + 3) / 4}, DType::kI32);  // [ceil(length / 4)]
    if (tp.rank() == 0) std::memcpy(packed.raw_data(), line.data(), static_cast<size_t>(length));
    tp.Broadcast(packed, 0);
    line.assign(static_cast<const char*>(packed.raw_data()), static_cast<size_t>(length));
    return line;
  };
}

}  // namespace kelvin::inference
