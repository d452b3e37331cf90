// Chat formats: a conversation as token ids, the loss on the assistant's turns. Kelvin does not run
// a model's Jinja chat template; it implements the formats by name and tells from the template's
// text which one the model uses (token layouts: docs/formats.md).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data {

// kLlama3: the bos token (<|begin_of_text|>), then per message
// <|start_header_id|>ROLE<|end_header_id|>\n\n, the content trimmed as Llama-3's template trims
// it, <|eot_id|>; Llama-3.1/3.2's dated system preamble is not written. kChatMl (Qwen2's): per
// message <|im_start|>ROLE\n, the content, <|im_end|>\n; no default system prompt is added.
enum class ChatFormat { kLlama3, kChatMl };

// The format a chat template is written for (by the special tokens it emits); an unknown or
// missing template is an error naming `source` and the formats Kelvin has.
absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& chat_template,
                                            const std::string& source);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// Appends the conversation's ids to `ids` and 1 (loss) / 0 (prompt) per id to `targets`. The loss
// covers each assistant message's content (the ids that start in it) and its end-of-turn token;
// headers and system and user turns are prompt. Content is encoded as tokenizers encodes text,
// special-token strings in it included (as transformers' apply_chat_template does). The
// tokenizer must have the format's special tokens (an error names the missing one).
absl::Status EncodeChat(const Tokenizer& tokenizer, ChatFormat format,
                        const std::vector<ChatMessage>& messages, std::vector<int64_t>& ids,
                        std::vector<int64_t>& targets);

}  // namespace kelvin::data
