// A Hugging Face tokenizer.json of the BPE families of Llama-architecture models in C++: encode
// and decode with the ids and text tokenizers gives. Byte-level BPE (Llama-3/3.1/3.2, GPT-2,
// Qwen2, SmolLM: vocabularies may lack byte symbols, which encode drops as tokenizers does) and
// SentencePiece-style BPE with byte fallback (Llama-2, TinyLlama, Mistral). What tokenizer.json
// holds beyond them (another model type, normalizer, pre-tokenizer or decoder step) is an error
// naming the unsupported part when it is loaded, never an approximation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/added_vocabulary.h"
#include "data/tokenizer/bpe_model.h"
#include "data/tokenizer/decoder.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/pre_tokenizer.h"

namespace kelvin::data {

class Tokenizer {
 public:
  // From tokenizer.json's text; errors name `source` and the field.
  static absl::StatusOr<Tokenizer> FromJson(std::string_view json_text, const std::string& source);
  // `directory`/tokenizer.json (a model directory, e.g. model.hf_dir), with the bos and eos
  // tokens its tokenizer_config.json names when it has one.
  static absl::StatusOr<Tokenizer> FromDirectory(const std::string& directory);

  // As tokenizers' encode(text): added tokens are matched first (leftmost-longest; in the raw
  // text, or after the normalizer for "normalized" ones), the normalizer (NFC; Prepend/Replace)
  // runs on the text between them, then the pre-tokenizer's pieces (Split regexes by PCRE2,
  // Metaspace) go through the BPE model. Appends the ids to `ids`; with `add_special_tokens`,
  // inside the post-processor's template (<|begin_of_text|> or <s> first). Text that is not valid
  // UTF-8 is an error naming the byte offset. A byte (or character) that no token spells is
  // dropped, as tokenizers does; the first time, a warning names the tokenizer and the offset.
  absl::Status Encode(std::string_view text, bool add_special_tokens,
                      std::vector<int32_t>& ids) const;
  // The text of `ids` as tokenizers' decode: ids of no token (beyond the tokenizer, inside a
  // model's padded vocabulary) are skipped, and special tokens with `skip_special_tokens`; the
  // decoder turns the rest into text. Never an error (the StatusOr stays for callers).
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                                     bool skip_special_tokens) const;

  // The id of a token's text (an added token's content or a vocabulary spelling), or nullopt.
  std::optional<int32_t> TokenId(std::string_view token) const;
  // Whether some token has `id` (what a sampler keeps to generate only spellable ids).
  bool HasToken(int32_t id) const;
  int64_t vocab_size() const { return vocab_size_; }  // largest id + 1
  // tokenizer_config.json's bos_token / eos_token (FromDirectory), else nullopt.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

 private:
  Tokenizer(BpeModel model) : model_(std::move(model)) {}
  // Text between raw-matched added tokens, starting at byte `offset` of the input.
  absl::Status EncodeSegment(std::string_view segment, size_t offset, std::vector<int32_t>& ids,
                             DroppedUnits& dropped) const;

  std::string source_;  // the file, for warnings
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  AddedVocabulary added_;
  TokenDecoder decoder_;
  // The post-processor's single-sequence template: special tokens' ids, and where the encoded
  // text goes (an empty entry); empty: the ids alone.
  std::vector<std::vector<int32_t>> template_;
  int64_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  // Set once an encode dropped a unit and said so (shared by copies: once per loaded file).
  std::shared_ptr<std::atomic<bool>> reported_drop_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace kelvin::data
