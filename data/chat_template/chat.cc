// Rendering and encoding conversations with the loss mask the rendering implies (see chat.h).
#include "data/chat_template/chat.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "data/chat_template/text.h"

namespace kelvin::chat_template {
namespace {

// transformers' _alias_reasoning_fields: a message's reasoning under any of its names is also
// given as "thinking" (first) and "reasoning_content" (last).
Value MessageValue(const Value& value) {
  if (!value.is_dict()) return value;
  const Value* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const Value* found = value.dict().Find(key);
    if (found != nullptr && !found->is_none()) {
      reasoning = found;
      break;
    }
  }
  if (reasoning == nullptr) return value;
  Dict aliased;
  aliased.items.emplace_back("thinking", *reasoning);
  for (const auto& [key, item] : value.dict().items) aliased.Set(key, item);
  const Value copy = *reasoning;
  std::erase_if(aliased.items, [](const auto& item) { return item.first == "reasoning_content"; });
  aliased.items.emplace_back("reasoning_content", copy);
  return Value::FromDict(std::move(aliased));
}

absl::StatusOr<RenderResult> Render(const ModelTemplate& model, const List& messages, size_t count,
                                    bool add_generation_prompt, const Value& tools,
                                    const ChatOptions& options) {
  KELVIN_ASSIGN_OR_RETURN(const Template* chosen,
                          model.Select(!tools.is_none(), options.template_name));
  Dict context = model.special_tokens();
  context.Set("messages",
              Value::FromList(List(messages.begin(), messages.begin() + static_cast<long>(count))));
  context.Set("tools", tools);
  context.Set("documents", Value::None());
  context.Set("add_generation_prompt", Value::Bool(add_generation_prompt));
  return chosen->Render(context, options.render);
}

struct ChatValues {
  List messages;
  Value tools = Value::None();
};

absl::StatusOr<ChatValues> ToValues(const Value& messages, const ChatOptions& options) {
  if (!messages.is_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the messages are a ", messages.TypeName(), ", not a list"));
  }
  ChatValues values;
  for (const Value& message : messages.list()) values.messages.push_back(MessageValue(message));
  values.tools = options.tools;
  return values;
}

// Whether `id`, whose text is `kept` (decoded keeping special tokens), is a special token: it has
// text, and decoding with skip_special_tokens drops it.
bool IsSpecial(const data::Tokenizer& tokenizer, int32_t id, std::string_view kept) {
  if (kept.empty()) return false;
  const absl::StatusOr<std::string> skipped = tokenizer.Decode({id}, true);
  return skipped.ok() && skipped->empty();
}

bool IsSpecial(const data::Tokenizer& tokenizer, int32_t id) {
  const absl::StatusOr<std::string> kept = tokenizer.Decode({id}, false);
  return kept.ok() && IsSpecial(tokenizer, id, *kept);
}

}  // namespace

absl::StatusOr<std::string> RenderChat(const ModelTemplate& model, const Value& messages,
                                       const ChatOptions& options) {
  KELVIN_ASSIGN_OR_RETURN(const ChatValues values, ToValues(messages, options));
  KELVIN_ASSIGN_OR_RETURN(RenderResult result,
                          Render(model, values.messages, values.messages.size(),
                                 options.add_generation_prompt, values.tools, options));
  return std::move(result.text);
}

absl::StatusOr<EncodedChat> EncodeChatSample(const data::Tokenizer& tokenizer,
                                             const ModelTemplate& model, const Value& messages,
                                             const ChatOptions& options) {
  KELVIN_ASSIGN_OR_RETURN(const ChatValues values, ToValues(messages, options));
  const size_t n = values.messages.size();
  KELVIN_ASSIGN_OR_RETURN(const RenderResult whole,
                          Render(model, values.messages, n, false, values.tools, options));
  const std::string& text = whole.text;
  std::vector<int32_t> encoded;
  KELVIN_RETURN_IF_ERROR(tokenizer.Encode(text, /*add_special_tokens=*/false, encoded));
  // starts[t]: the byte offset in `text` where id t starts (its decoded bytes laid end to end).
  // `spelled`: the ids' text, which differs from `text` where a normalizer (NFC) changed it.
  std::vector<size_t> starts;
  std::string spelled;
  for (const int32_t id : encoded) {
    starts.push_back(spelled.size());
    KELVIN_ASSIGN_OR_RETURN(const std::string bytes, tokenizer.Decode({id}, false));
    spelled += bytes;
  }
  starts.push_back(spelled.size());
  // Where byte `offset` of `text` lies in `spelled`: the length of the prefix's own encoding.
  const bool spelled_as_text = spelled == text;
  const auto spelled_offset = [&](size_t offset) -> absl::StatusOr<size_t> {
    if (spelled_as_text) return offset;
    std::vector<int32_t> prefix;
    KELVIN_RETURN_IF_ERROR(tokenizer.Encode(text.substr(0, offset), false, prefix));
    KELVIN_ASSIGN_OR_RETURN(const std::string prefix_text, tokenizer.Decode(prefix, false));
    return prefix_text.size();
  };
  EncodedChat chat;
  chat.ids.assign(encoded.begin(), encoded.end());
  chat.targets.assign(encoded.size(), 0);

  KELVIN_ASSIGN_OR_RETURN(const Template* chosen,
                          model.Select(!values.tools.is_none(), options.template_name));
  if (chosen->has_generation_blocks()) {
    for (const auto& [text_begin, text_end] : whole.generation_spans) {
      KELVIN_ASSIGN_OR_RETURN(const size_t begin, spelled_offset(text_begin));
      KELVIN_ASSIGN_OR_RETURN(const size_t end, spelled_offset(text_end));
      for (size_t t = 0; t < encoded.size(); ++t) {
        if (starts[t + 1] > begin && starts[t] < end) chat.targets[t] = 1;
      }
    }
    return chat;
  }
  for (size_t i = 0; i < n; ++i) {
    const Value* role =
        values.messages[i].is_dict() ? values.messages[i].dict().Find("role") : nullptr;
    if (role == nullptr || !role->is_string() || role->str() != "assistant") continue;
    KELVIN_ASSIGN_OR_RETURN(const RenderResult prompt_rendering,
                            Render(model, values.messages, i, true, values.tools, options));
    const std::string& prompt = prompt_rendering.text;
    // Q of the last message is the whole rendering, already in hand.
    RenderResult turn_rendering;
    if (i + 1 < n) {
      KELVIN_ASSIGN_OR_RETURN(turn_rendering,
                              Render(model, values.messages, i + 1, false, values.tools, options));
    }
    const std::string& turn = i + 1 < n ? turn_rendering.text : text;
    const std::string where = absl::StrCat("message ", i, " (an assistant turn)");
    if (!turn.starts_with(prompt)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the chat template's generation prompt before ", where,
          " is not how the template renders the turn, so the assistant's span cannot be read "
          "from the rendering (give the turns as separate samples, or use a template with "
          "{% generation %} blocks)"));
    }
    if (!text.starts_with(turn)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the chat template renders ", where,
          " differently once later messages follow (e.g. it drops an earlier turn's reasoning), "
          "so its loss mask is ambiguous: give each assistant turn as its own sample, ending "
          "with that turn"));
    }
    KELVIN_ASSIGN_OR_RETURN(const size_t begin, spelled_offset(prompt.size()));
    KELVIN_ASSIGN_OR_RETURN(const size_t end, spelled_offset(turn.size()));
    size_t first = encoded.size(), last = 0;  // the ids [first, last) that start in the span
    for (size_t t = 0; t < encoded.size(); ++t) {
      if (starts[t] >= begin && starts[t] < end) {
        first = std::min(first, t);
        last = t + 1;
      }
    }
    if (first >= last) continue;
    size_t trained_end = last;
    for (size_t t = last; t-- > first;) {
      const std::string_view bytes(spelled.data() + starts[t], starts[t + 1] - starts[t]);
      if (IsSpecial(tokenizer, encoded[t], bytes)) {
        const std::string_view after(spelled.data() + starts[t + 1], starts[last] - starts[t + 1]);
        if (StripPythonSpace(after, true, true).empty()) trained_end = t + 1;
        break;
      }
    }
    for (size_t t = first; t < trained_end; ++t) chat.targets[t] = 1;
  }
  return chat;
}

absl::StatusOr<std::vector<int32_t>> EndOfTurnIds(const data::Tokenizer& tokenizer,
                                                  const ModelTemplate& model,
                                                  const ChatOptions& options) {
  std::vector<int32_t> ids;
  if (const std::optional<std::string> eos = model.SpecialToken("eos_token")) {
    if (const std::optional<int32_t> id = tokenizer.TokenId(*eos)) ids.push_back(*id);
  }
  KELVIN_ASSIGN_OR_RETURN(
      const Value probe,
      ParseJson(R"([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}])",
                4));
  ChatOptions probe_options = options;
  probe_options.add_generation_prompt = false;
  KELVIN_ASSIGN_OR_RETURN(const EncodedChat chat,
                          EncodeChatSample(tokenizer, model, probe, probe_options));
  for (size_t t = 0; t < chat.ids.size(); ++t) {
    const int32_t id = static_cast<int32_t>(chat.ids[t]);
    if (chat.targets[t] == 1 && IsSpecial(tokenizer, id) &&
        std::find(ids.begin(), ids.end(), id) == ids.end()) {
      ids.push_back(id);
    }
  }
  return ids;
}

}  // namespace kelvin::chat_template
