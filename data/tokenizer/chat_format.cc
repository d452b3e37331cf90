// The llama3 and chatml chat formats, encoded piece by piece between their special tokens, where
// tokenizing the whole rendered text splits too (added tokens are matched before the regex), so
// the ids equal apply_chat_template's.
#include "data/tokenizer/chat_format.h"

#include "absl/strings/str_cat.h"

namespace kelvin::data {
namespace {

absl::StatusOr<int32_t> Special(const Tokenizer& tokenizer, const char* token, const char* format) {
  const std::optional<int32_t> id = tokenizer.TokenId(token);
  if (!id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("the chat format ", format, " needs the token ",
                                                   token, ", which the tokenizer does not have"));
  }
  return *id;
}

// Appends the ids of `prompt` + `content`, encoded as one text (so the ids are those of the
// rendered conversation even where the two would merge, e.g. "\n\n" and content that starts with
// a newline): ids that start inside `content` get `content_target`, the others 0.
absl::Status AppendTurn(const Tokenizer& tokenizer, const std::string& prompt,
                        std::string_view content, int64_t content_target, std::vector<int64_t>& ids,
                        std::vector<int64_t>& targets) {
  std::vector<int32_t> encoded;
  KELVIN_RETURN_IF_ERROR(
      tokenizer.Encode(prompt + std::string(content), /*add_special_tokens=*/false, encoded));
  size_t offset = 0;  // of the current id's first byte in prompt + content
  for (const int32_t id : encoded) {
    ids.push_back(id);
    targets.push_back(offset >= prompt.size() ? content_target : 0);
    KELVIN_ASSIGN_OR_RETURN(const std::string bytes, tokenizer.Decode({id}, false));
    offset += bytes.size();
  }
  return absl::OkStatus();
}

// Python's str.strip() whitespace (Unicode White_Space and the separators U+001C..U+001F), which
// Llama-3's template's `trim` strips: each a whole UTF-8 character, so a match at either end of
// valid text is at a character boundary.
constexpr std::string_view kPythonSpaces[] = {
    "\t",     "\n",     "\v",     "\f",     "\r",     " ",      "\x1c",   "\x1d",
    "\x1e",   "\x1f",   "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
    "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
    "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};

std::string_view StripPythonWhitespace(std::string_view text) {
  const auto strip = [&](bool front) {
    for (const std::string_view space : kPythonSpaces) {
      if (front ? text.starts_with(space) : text.ends_with(space)) {
        front ? text.remove_prefix(space.size()) : text.remove_suffix(space.size());
        return true;
      }
    }
    return false;
  };
  while (strip(/*front=*/true)) {
  }
  while (strip(/*front=*/false)) {
  }
  return text;
}

void AppendId(int32_t id, int64_t target, std::vector<int64_t>& ids,
              std::vector<int64_t>& targets) {
  ids.push_back(id);
  targets.push_back(target);
}

}  // namespace

absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& chat_template,
                                            const std::string& source) {
  if (chat_template.find("<|start_header_id|>") != std::string::npos &&
      chat_template.find("<|eot_id|>") != std::string::npos) {
    return ChatFormat::kLlama3;
  }
  if (chat_template.find("<|im_start|>") != std::string::npos &&
      chat_template.find("<|im_end|>") != std::string::npos) {
    return ChatFormat::kChatMl;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source,
      chat_template.empty() ? " has no chat template"
                            : "'s chat template is neither of the chat formats Kelvin has",
      " (llama3: <|start_header_id|>role<|end_header_id|> ... <|eot_id|>; chatml: <|im_start|>"
      "role ... <|im_end|>): \"messages\" samples need one; give text, prompt/completion or "
      "input_ids samples instead"));
}

absl::Status EncodeChat(const Tokenizer& tokenizer, ChatFormat format,
                        const std::vector<ChatMessage>& messages, std::vector<int64_t>& ids,
                        std::vector<int64_t>& targets) {
  if (format == ChatFormat::kLlama3) {
    KELVIN_ASSIGN_OR_RETURN(const int32_t start,
                            Special(tokenizer, "<|start_header_id|>", "llama3"));
    KELVIN_ASSIGN_OR_RETURN(const int32_t end, Special(tokenizer, "<|end_header_id|>", "llama3"));
    KELVIN_ASSIGN_OR_RETURN(const int32_t eot, Special(tokenizer, "<|eot_id|>", "llama3"));
    if (!tokenizer.bos_id().has_value()) {
      return absl::InvalidArgumentError(
          "the chat format llama3 starts with the bos_token, which the tokenizer's "
          "tokenizer_config.json does not name");
    }
    AppendId(*tokenizer.bos_id(), 0, ids, targets);
    for (const ChatMessage& message : messages) {
      const int64_t loss = message.role == "assistant" ? 1 : 0;
      AppendId(start, 0, ids, targets);
      KELVIN_RETURN_IF_ERROR(AppendTurn(tokenizer, message.role, "", 0, ids, targets));
      AppendId(end, 0, ids, targets);
      KELVIN_RETURN_IF_ERROR(AppendTurn(tokenizer, "\n\n", StripPythonWhitespace(message.content),
                                        loss, ids, targets));
      AppendId(eot, loss, ids, targets);
    }
    return absl::OkStatus();
  }
  KELVIN_ASSIGN_OR_RETURN(const int32_t start, Special(tokenizer, "<|im_start|>", "chatml"));
  KELVIN_ASSIGN_OR_RETURN(const int32_t end, Special(tokenizer, "<|im_end|>", "chatml"));
  for (const ChatMessage& message : messages) {
    const int64_t loss = message.role == "assistant" ? 1 : 0;
    AppendId(start, 0, ids, targets);
    KELVIN_RETURN_IF_ERROR(
        AppendTurn(tokenizer, message.role + "\n", message.content, loss, ids, targets));
    AppendId(end, loss, ids, targets);
    KELVIN_RETURN_IF_ERROR(AppendTurn(tokenizer, "\n", "", 0, ids, targets));
  }
  return absl::OkStatus();
}

}  // namespace kelvin::data
