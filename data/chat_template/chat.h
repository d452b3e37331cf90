// Conversations through a model's chat template: the rendered text (for generation, a chat
// mode, prepare-data), its token ids with the loss mask on the assistant's turns, and the tokens
// that end a turn (where generation stops).
//
// The loss mask comes from the rendering, not from knowledge of a format. For the assistant
// message i: P = render(messages[:i], add_generation_prompt=true), Q = render(messages[:i+1]);
// P must be a prefix of Q and Q of the whole rendering, and the assistant's span is Q less P.
// Ids that start inside a span are targets, except the text after the span's last special token
// when it is only whitespace (ChatML's "\n" after <|im_end|>: the model stops at the special
// token and never generates it). A template with {% generation %} blocks marks the spans itself,
// as transformers' return_assistant_tokens_mask reads them (every id that overlaps a block).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/chat_template/model_template.h"
#include "data/chat_template/template.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::chat_template {

struct ChatOptions {
  bool add_generation_prompt = false;
  Value tools = Value::None();  // a list of tool schemas, or none
  std::string template_name;    // empty: as transformers picks
  RenderOptions render;         // strftime_now's date, bounds
};

// The text of `messages` (a list of message dicts, e.g. ParseJson of a JSON array, passed to the
// template as they are, with reasoning_content / thinking aliased as transformers aliases them).
absl::StatusOr<std::string> RenderChat(const ModelTemplate& model, const Value& messages,
                                       const ChatOptions& options);

struct EncodedChat {
  std::vector<int64_t> ids;      // [n] the rendering encoded without added special tokens
  std::vector<int64_t> targets;  // [n] 1 on the assistant's spans (see above), else 0
};

// The ids transformers' apply_chat_template(tokenize=True) gives (the rendered text encoded with
// add_special_tokens=False) and the loss mask of the rule above. A message whose rendering
// changes once later turns follow (a template that drops earlier reasoning) is an error naming it.
absl::StatusOr<EncodedChat> EncodeChatSample(const data::Tokenizer& tokenizer,
                                             const ModelTemplate& model, const Value& messages,
                                             const ChatOptions& options);

// The ids that end an assistant turn: the eos token and the special tokens the template writes
// after an assistant's content (<|eot_id|>, <|im_end|>, <end_of_turn>, ...), found by rendering a
// probe conversation. Generation in a chat stops at any of them.
absl::StatusOr<std::vector<int32_t>> EndOfTurnIds(const data::Tokenizer& tokenizer,
                                                  const ModelTemplate& model,
                                                  const ChatOptions& options);

}  // namespace kelvin::chat_template
