// TextSampleEncoder: fine-tuning samples given as text ("text", "prompt"/"completion" or chat
// "messages" lines), tokenized with the model's tokenizer for `kelvin prepare-data --tokenizer DIR`
// (formats: docs/formats.md).
#pragma once

#include <ctime>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "data/chat_template/model_template.h"
#include "data/sft/jsonl_sample_parser.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data {

// A "text" line is a document: the tokenizer's template (Llama-3: BOS), the text and the eos token,
// the loss on every token. A prompt line is the template + prompt without loss, then the completion
// + eos with loss, the two encoded apart (so the prompt's ids are those a generation from it starts
// with). A "messages" line (with optional "tools") is rendered by the model's own chat template
// and encoded as transformers' apply_chat_template encodes it, the loss on the assistant's spans
// of the rendering (data/chat_template/chat.h). Other keys are ignored (and counted); an
// input_ids line is not this encoder's.
class TextSampleEncoder {
 public:
  // The tokenizer of model directory `directory` (tokenizer.json, tokenizer_config.json with its
  // eos_token, the chat template when it has one).
  // `chat_date`: what the template's strftime_now() gives ("2026-12-07"), for reproducible data;
  // empty: the current date.
  static absl::StatusOr<TextSampleEncoder> FromDirectory(const std::string& directory,
                                                         const std::string& chat_date = "");

  // True when `object` (parsed from `line`) holds "text", "prompt"/"completion" or "messages":
  // then `sample` holds its ids and targets (empty targets: every token trains). A chat line is
  // read again from `line` so its messages keep their keys' order (the template sees them as
  // transformers does). Problems are errors naming the field (the caller adds the file and line).
  absl::StatusOr<bool> Encode(const nlohmann::json& object, std::string_view line,
                              JsonlSample& sample) const;

  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  TextSampleEncoder(Tokenizer tokenizer, int32_t eos)
      : tokenizer_(std::move(tokenizer)), eos_(eos) {}
  absl::Status EncodeMessages(const nlohmann::json& object, std::string_view line,
                              JsonlSample& sample) const;

  Tokenizer tokenizer_;
  int32_t eos_;
  // The model's chat template, or why there is none (reported by the first "messages" line).
  absl::StatusOr<chat_template::ModelTemplate> chat_template_ = absl::UnknownError("unset");
  std::optional<std::tm> chat_date_;
};

}  // namespace kelvin::data
