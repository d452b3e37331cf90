// Text, prompt/completion and chat samples into ids and loss targets.
#include "data/sft/text_sample_encoder.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "data/chat_template/chat.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

// A chat line's arrays and objects nest at most this deep (messages, tool calls and their
// arguments, tool schemas).
constexpr int kMaxChatDepth = 32;

// `object`[key] as text: a non-empty string; else an error naming the key and `field`.
absl::StatusOr<std::string_view> TextField(const json& object, const char* key,
                                           const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat("no \"", key, "\" in ", field));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" of ", field, " is ",
                                                   it->dump().substr(0, 80), ", not a string"));
  }
  const std::string& text = it->get_ref<const std::string&>();
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" of ", field, " is empty"));
  }
  return std::string_view(text);
}

absl::Status Tokenize(const Tokenizer& tokenizer, std::string_view text, bool add_special_tokens,
                      const char* field, std::vector<int64_t>& tokens) {
  std::vector<int32_t> ids;
  const absl::Status encoded = tokenizer.Encode(text, add_special_tokens, ids);
  if (!encoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", field, "\": ", encoded.message()));
  }
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TextSampleEncoder> TextSampleEncoder::FromDirectory(const std::string& directory,
                                                                   const std::string& chat_date) {
  KELVIN_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromDirectory(directory));
  if (!tokenizer.eos_id().has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer ", directory,
                     ": its tokenizer_config.json names no eos_token, which "
                     "prepare-data appends to every text document and completion"));
  }
  const int32_t eos = *tokenizer.eos_id();
  TextSampleEncoder encoder(std::move(tokenizer), eos);
  if (!chat_date.empty()) {
    KELVIN_ASSIGN_OR_RETURN(encoder.chat_date_,
                            chat_template::ParseFixedDate(chat_date, "--chat-date"));
  }
  encoder.chat_template_ = chat_template::ModelTemplate::FromDirectory(directory);
  if (absl::IsNotFound(encoder.chat_template_.status())) {
    encoder.chat_template_ = absl::InvalidArgumentError(
        absl::StrCat("--tokenizer ", encoder.chat_template_.status().message(),
                     ": \"messages\" samples need one; give text, prompt/completion or input_ids "
                     "samples instead"));
  } else if (!encoder.chat_template_.ok()) {
    // A broken template is an error now, even before a chat line needs it.
    return encoder.chat_template_.status();
  }
  return encoder;
}

absl::StatusOr<bool> TextSampleEncoder::Encode(const json& object, std::string_view line,
                                               JsonlSample& sample) const {
  const bool text = object.contains("text"), prompt = object.contains("prompt"),
             messages = object.contains("messages");
  // An input_ids sample may carry its text besides (as Hugging Face datasets do): not ours.
  if (text + prompt + messages == 0 || object.contains("input_ids")) return false;
  if (text + prompt + messages > 1) {
    return absl::InvalidArgumentError(
        "the line mixes sample kinds: give one of \"text\", \"prompt\" with \"completion\", "
        "\"messages\" and \"input_ids\"");
  }
  sample.tokens.clear();
  sample.targets.clear();
  sample.ignored_keys.clear();
  for (const auto& [key, value] : object.items()) {
    if (key != "text" && key != "prompt" && key != "completion" && key != "messages" &&
        (key != "tools" || !messages)) {
      sample.ignored_keys.push_back(key);
    }
  }
  if (messages) {
    KELVIN_RETURN_IF_ERROR(EncodeMessages(object, line, sample));
    return true;
  }
  if (text) {
    KELVIN_ASSIGN_OR_RETURN(const std::string_view document,
                            TextField(object, "text", "the sample"));
    KELVIN_RETURN_IF_ERROR(Tokenize(tokenizer_, document, true, "text", sample.tokens));
    sample.tokens.push_back(eos_);
    return true;
  }
  KELVIN_ASSIGN_OR_RETURN(const std::string_view prompt_text,
                          TextField(object, "prompt", "the sample"));
  KELVIN_ASSIGN_OR_RETURN(const std::string_view completion,
                          TextField(object, "completion", "a prompt sample"));
  KELVIN_RETURN_IF_ERROR(Tokenize(tokenizer_, prompt_text, true, "prompt", sample.tokens));
  sample.targets.assign(sample.tokens.size(), 0);
  KELVIN_RETURN_IF_ERROR(Tokenize(tokenizer_, completion, false, "completion", sample.tokens));
  sample.tokens.push_back(eos_);
  sample.targets.resize(sample.tokens.size(), 1);
  return true;
}

absl::Status TextSampleEncoder::EncodeMessages(const json& object, std::string_view line,
                                               JsonlSample& sample) const {
  if (!chat_template_.ok()) return chat_template_.status();
  const json& messages = object["messages"];
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"messages\" is ", messages.dump().substr(0, 80),
                     ", not a non-empty array of {\"role\": ..., \"content\": ...}"));
  }
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = absl::StrCat("\"messages\"[", i, "]");
    if (!messages[i].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is ", messages[i].dump().substr(0, 80), ", not an object"));
    }
    KELVIN_ASSIGN_OR_RETURN(const std::string_view role, TextField(messages[i], "role", field));
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return absl::InvalidArgumentError(absl::StrCat("\"role\" of ", field, " is \"",
                                                     std::string(role),
                                                     "\": use system, user, assistant or tool"));
    }
    // An assistant turn that calls tools may have no text; the template renders its tool_calls.
    const auto tool_calls = messages[i].find("tool_calls");
    const bool calls_tools = tool_calls != messages[i].end() && !tool_calls->is_null();
    if (calls_tools && (role != "assistant" || !tool_calls->is_array())) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"tool_calls\" of ", field, " is ", tool_calls->dump().substr(0, 80),
                       role != "assistant" ? ": only an assistant message calls tools"
                                           : ", not an array of tool calls"));
    }
    const auto content = messages[i].find("content");
    if (!calls_tools ||
        (content != messages[i].end() && !content->is_null() &&
         !(content->is_string() && content->get_ref<const std::string&>().empty()))) {
      KELVIN_RETURN_IF_ERROR(TextField(messages[i], "content", field).status());
    }
    any_assistant |= role == "assistant";
  }
  if (!any_assistant) {
    return absl::InvalidArgumentError(
        "\"messages\" has no assistant message: the sample would have nothing to train on");
  }
  const auto tools = object.find("tools");
  if (tools != object.end() && !tools->is_null() && !tools->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("\"tools\" is ", tools->dump().substr(0, 80),
                                                   ", not an array of tool schemas"));
  }
  // The line again, its keys in order and none twice (the check above read nlohmann's sorted copy).
  absl::StatusOr<chat_template::Value> ordered = chat_template::ParseJson(line, kMaxChatDepth);
  if (!ordered.ok()) return ordered.status();
  chat_template::ChatOptions options;
  if (const chat_template::Value* given = ordered->dict().Find("tools")) options.tools = *given;
  options.render.now = chat_date_;
  absl::StatusOr<chat_template::EncodedChat> encoded = chat_template::EncodeChatSample(
      tokenizer_, *chat_template_, *ordered->dict().Find("messages"), options);
  if (!encoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("\"messages\": ", encoded.status().message()));
  }
  sample.tokens = std::move(encoded->ids);
  sample.targets = std::move(encoded->targets);
  return absl::OkStatus();
}

}  // namespace kelvin::data
