// The "messages" (and "tools") of a chat line, checked by one set of rules for the samples
// prepare-data trains on and the conversations `kelvin generate --chat` continues, and read with
// their keys in the line's order, as the chat template sees them (formats: docs/formats.md).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/chat_template/value.h"

namespace kelvin::data {

// What a conversation is for: a training sample needs an assistant turn to learn from; a
// generation prompt stops before the assistant's next turn (its last message is not the
// assistant's).
enum class ChatUse { kTraining, kGeneration };

struct ChatMessages {
  chat_template::Value messages;                              // a list of message dicts
  chat_template::Value tools = chat_template::Value::None();  // a list of tool schemas, or none
};

// The conversation of `object` (a line parsed as strict JSON, holding "messages"): every message
// an object with a role (system, user, assistant or tool) and text content (an assistant's that
// calls tools may have none), "tools" an array when given. `line`, the object's text, is read
// again so that the messages keep their keys' order. Problems are errors naming the field
// ("messages"[2], "tools"); the caller adds the file and line.
absl::StatusOr<ChatMessages> ReadChatMessages(const nlohmann::json& object, std::string_view line,
                                              ChatUse use);

// Line `line` of the conversations file `path` (`text`, not blank): a JSON object with "messages"
// and optionally "tools", bounded and checked as prepare-data's lines are (CheckJsonLineShape,
// strict JSON, ReadChatMessages for generation). Errors start with "path:line: ". The line's other
// keys are appended to `ignored_keys`.
absl::StatusOr<ChatMessages> ParseChatLine(std::string_view text, const std::string& path,
                                           int64_t line, std::vector<std::string>& ignored_keys);

}  // namespace kelvin::data
