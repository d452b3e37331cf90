// TextSampleEncoder: fine-tuning samples given as text ("text", "prompt"/"completion" or chat
// "messages" lines), tokenized with the model's tokenizer for `kelvin prepare-data --tokenizer DIR`
// (formats: docs/formats.md).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "data/sft/jsonl_sample_parser.h"
#include "data/tokenizer/chat_format.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data {

// A "text" line is a document: the tokenizer's template (Llama-3: BOS), the text and the eos token,
// the loss on every token. A prompt line is the template + prompt without loss, then the completion
// + eos with loss, the two encoded apart (so the prompt's ids are those a generation from it starts
// with). A "messages" line is in the model's chat format (chat_format.h), the loss on the
// assistant's turns only. Other keys are ignored (and counted); an input_ids line is not this
// encoder's.
class TextSampleEncoder {
 public:
  // The tokenizer of model directory `directory` (tokenizer.json, tokenizer_config.json with its
  // eos_token, the chat template when it has one).
  static absl::StatusOr<TextSampleEncoder> FromDirectory(const std::string& directory);

  // True when `object` holds "text", "prompt"/"completion" or "messages": then `sample` holds its
  // ids and targets (empty targets: every token trains). Problems are errors naming the field
  // (the caller adds the file and line).
  absl::StatusOr<bool> Encode(const nlohmann::json& object, JsonlSample& sample) const;

  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  TextSampleEncoder(Tokenizer tokenizer, int32_t eos)
      : tokenizer_(std::move(tokenizer)), eos_(eos) {}
  absl::Status EncodeMessages(const nlohmann::json& messages, JsonlSample& sample) const;

  Tokenizer tokenizer_;
  int32_t eos_;
  absl::StatusOr<ChatFormat> chat_format_ = absl::UnknownError("unset");
};

}  // namespace kelvin::data
