// Samples given as text, tokenized with the model's tokenizer (`kelvin prepare-data --tokenizer
// DIR`), one JSON object per line:
//   {"text": "..."}                          a document (continued pre-training, long-context
//                                            extension): the tokenizer's template (Llama-3: BOS),
//                                            the text, the eos token as end of document (as
//                                            Megatron's --append-eod); loss on every token
//   {"prompt": "...", "completion": "..."}   BOS + prompt without loss, then completion + eos with
//                                            loss; the two are encoded apart, so the prompt's ids
//                                            are those a generation from it starts with
//   {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}
//                                            chat SFT in the model's chat format (chat_format.h):
//                                            loss on the assistant turns only
// Other keys are ignored (and counted); a line of another kind (input_ids) is not this encoder's.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "data/sft/jsonl_sample_parser.h"
#include "data/tokenizer/chat_format.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data {

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
