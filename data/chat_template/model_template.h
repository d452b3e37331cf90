// A model directory's chat template, found as transformers 5 finds it: chat_template.jinja (and
// additional_chat_templates/NAME.jinja) beside tokenizer_config.json take priority over its
// "chat_template", which is a string or a list of {"name", "template"}; with several templates
// a render picks "tool_use" when tools are given and it exists, else "default". Also the special
// token strings transformers passes to the template (bos_token, eos_token, ...).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/status.h"
#include "data/chat_template/template.h"

namespace kelvin::chat_template {

class ModelTemplate {
 public:
  // `directory`'s template. No template at all is NotFound (the message says where Kelvin looked);
  // a template of the wrong type, an unreadable or dangling chat_template.jinja, or a template
  // that does not parse is InvalidArgument naming the file and field.
  static absl::StatusOr<ModelTemplate> FromDirectory(const std::string& directory);
  // One template given as text (tests, and callers that hold a template), with special tokens.
  static absl::StatusOr<ModelTemplate> FromSource(std::string_view source, std::string name,
                                                  Dict special_tokens);

  // The template transformers would render for a conversation with (or without) tools; `name`,
  // when not empty, picks a named one.
  absl::StatusOr<const Template*> Select(bool has_tools, const std::string& name = "") const;

  // bos_token, eos_token, unk_token, pad_token, ... as strings, for the render's context.
  const Dict& special_tokens() const { return special_tokens_; }
  // The special token string `key` ("eos_token"), or nullopt.
  std::optional<std::string> SpecialToken(const std::string& key) const;
  const std::string& source() const { return source_; }  // where it was read, for errors

 private:
  std::map<std::string, Template> templates_;  // by name; one unnamed template is "default"
  Dict special_tokens_;
  std::string source_;
};

}  // namespace kelvin::chat_template
