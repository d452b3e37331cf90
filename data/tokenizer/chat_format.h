// Chat formats: a conversation as token ids with the loss on the assistant's turns. A model's
// chat template is Jinja, which Kelvin does not run; it implements the formats by name and tells
// from the template text which one the model uses:
//   llama3: <|begin_of_text|> then per message
//           <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>  (content trimmed, as
//           Llama-3's template does)
//           Llama-3.1/3.2's templates also write a dated system preamble ("Cutting Knowledge
//           Date: ...") that this format does not: put it in the data's system message if wanted
//   chatml: per message <|im_start|>ROLE\nCONTENT<|im_end|>\n  (Qwen2's, without the default
//           system prompt its template adds when there is none)
// The loss covers each assistant message's content (the ids that start in it) and its end-of-turn
// token; the headers, the
// system and user turns are prompt. Content is encoded as tokenizers encodes text, special-token
// strings in it included (as transformers' apply_chat_template does).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data {

enum class ChatFormat { kLlama3, kChatMl };

// The format a chat template is written for (by the special tokens it emits); an unknown or
// missing template is an error naming `source` and the formats Kelvin has.
absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& chat_template,
                                            const std::string& source);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// Appends the conversation's ids to `ids` and 1 (loss) / 0 (prompt) per id to `targets`. The
// tokenizer must have the format's special tokens (an error names the missing one).
absl::Status EncodeChat(const Tokenizer& tokenizer, ChatFormat format,
                        const std::vector<ChatMessage>& messages, std::vector<int64_t>& ids,
                        std::vector<int64_t>& targets);

}  // namespace kelvin::data
