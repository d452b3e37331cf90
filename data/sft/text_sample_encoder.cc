// Text, prompt/completion and chat samples into ids and loss targets.
#include "data/sft/text_sample_encoder.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "data/chat_template/chat.h"
#include "data/sft/chat_messages.h"
#include "data/sft/json_line.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

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
  KELVIN_ASSIGN_OR_RETURN(const ChatMessages chat,
                          ReadChatMessages(object, line, ChatUse::kTraining));
  chat_template::ChatOptions options;
  options.tools = chat.tools;
  options.render.now = chat_date_;
  absl::StatusOr<chat_template::EncodedChat> encoded =
      chat_template::EncodeChatSample(tokenizer_, *chat_template_, chat.messages, options);
  if (!encoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("\"messages\": ", encoded.status().message()));
  }
  if (std::find(encoded->targets.begin(), encoded->targets.end(), 1) == encoded->targets.end()) {
    return absl::InvalidArgumentError(
        "\"messages\": the chat template renders no token of the assistant messages (the "
        "rendering with them adds nothing to the rendering before them): the sample would have "
        "nothing to train on; check that the template writes each message's content");
  }
  sample.tokens = std::move(encoded->ids);
  sample.targets = std::move(encoded->targets);
  return absl::OkStatus();
}

}  // namespace kelvin::data
