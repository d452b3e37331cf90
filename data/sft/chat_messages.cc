// Chat lines' messages checked and read in their keys' order (see chat_messages.h).
#include "data/sft/chat_messages.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/strict_json.h"
#include "data/sft/json_line.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

// A chat line's arrays and objects nest at most this deep (messages, tool calls and their
// arguments, tool schemas).
constexpr int kMaxChatDepth = 32;

// The role of message `field`, one of the four; else an error naming it.
absl::StatusOr<std::string> CheckMessage(const json& message, const std::string& field) {
  if (!message.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", message.dump().substr(0, 80), ", not an object"));
  }
  KELVIN_RETURN_IF_ERROR(TextField(message, "role", field).status());
  const std::string& role = message["role"].get_ref<const std::string&>();
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    return absl::InvalidArgumentError(absl::StrCat("\"role\" of ", field, " is \"", role,
                                                   "\": use system, user, assistant or tool"));
  }
  // An assistant turn that calls tools may have no text; the template renders its tool_calls.
  const auto tool_calls = message.find("tool_calls");
  const bool calls_tools = tool_calls != message.end() && !tool_calls->is_null();
  if (calls_tools && (role != "assistant" || !tool_calls->is_array())) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"tool_calls\" of ", field, " is ", tool_calls->dump().substr(0, 80),
                     role != "assistant" ? ": only an assistant message calls tools"
                                         : ", not an array of tool calls"));
  }
  const auto content = message.find("content");
  if (!calls_tools || (content != message.end() && !content->is_null() &&
                       !(content->is_string() && content->get_ref<const std::string&>().empty()))) {
    KELVIN_RETURN_IF_ERROR(TextField(message, "content", field).status());
  }
  return role;
}

}  // namespace

absl::StatusOr<ChatMessages> ReadChatMessages(const json& object, std::string_view line,
                                              ChatUse use) {
  const json& messages = object["messages"];
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"messages\" is ", messages.dump().substr(0, 80),
                     ", not a non-empty array of {\"role\": ..., \"content\": ...}"));
  }
  bool any_assistant = false;
  std::string last_role;
  for (size_t i = 0; i < messages.size(); ++i) {
    KELVIN_ASSIGN_OR_RETURN(last_role,
                            CheckMessage(messages[i], absl::StrCat("\"messages\"[", i, "]")));
    any_assistant |= last_role == "assistant";
  }
  if (use == ChatUse::kTraining && !any_assistant) {
    return absl::InvalidArgumentError(
        "\"messages\" has no assistant message: the sample would have nothing to train on");
  }
  if (use == ChatUse::kGeneration && last_role == "assistant") {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"messages\"[", messages.size() - 1,
        "] is the assistant's: generation writes the assistant's next turn, so end the "
        "conversation with the message it answers (a user or tool message)"));
  }
  const auto tools = object.find("tools");
  if (tools != object.end() && !tools->is_null() && !tools->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("\"tools\" is ", tools->dump().substr(0, 80),
                                                   ", not an array of tool schemas"));
  }
  // The line again, its keys in order and none twice (the checks above read nlohmann's sorted
  // copy).
  KELVIN_ASSIGN_OR_RETURN(const chat_template::Value ordered,
                          chat_template::ParseJson(line, kMaxChatDepth));
  ChatMessages chat;
  chat.messages = *ordered.dict().Find("messages");
  if (const chat_template::Value* given = ordered.dict().Find("tools")) chat.tools = *given;
  return chat;
}

absl::StatusOr<ChatMessages> ParseChatLine(std::string_view text, const std::string& path,
                                           int64_t line, std::vector<std::string>& ignored_keys) {
  const std::string where = absl::StrCat(path, ":", line);
  const auto line_error = [&](absl::string_view detail) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", detail));
  };
  if (const absl::Status shape = CheckJsonLineShape(text); !shape.ok()) {
    return line_error(shape.message());
  }
  KELVIN_ASSIGN_OR_RETURN(const json object, io::ParseStrictJson(text, where));
  if (!object.is_object() || !object.contains("messages")) {
    return line_error(absl::StrCat(
        object.is_object() ? "the object has no \"messages\"" : "the line is not an object",
        ": each line of a conversations file is {\"messages\": [{\"role\": \"user\", "
        "\"content\": ...}, ...]}"));
  }
  for (const auto& [key, value] : object.items()) {
    if (key != "messages" && key != "tools") ignored_keys.push_back(key);
  }
  absl::StatusOr<ChatMessages> chat = ReadChatMessages(object, text, ChatUse::kGeneration);
  if (!chat.ok()) return line_error(chat.status().message());
  return chat;
}

}  // namespace kelvin::data
