// A Hugging Face tokenizer.json of the byte-level BPE family (Llama-3/3.1/3.2, GPT-2, Qwen2) in
// C++: encode and decode with the ids tokenizers gives. What tokenizer.json holds beyond that
// family (another normalizer, another model type, prefix spaces, a WordPiece decoder, ...) is an
// error naming the unsupported part when it is loaded, never an approximation.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/bpe_model.h"
#include "data/tokenizer/split_regex.h"

namespace kelvin::data {

class Tokenizer {
 public:
  // From tokenizer.json's text; errors name `source` and the field.
  static absl::StatusOr<Tokenizer> FromJson(std::string_view json_text, const std::string& source);
  // `directory`/tokenizer.json (a model directory, e.g. model.hf_dir), with the bos and eos
  // tokens its tokenizer_config.json names when it has one.
  static absl::StatusOr<Tokenizer> FromDirectory(const std::string& directory);

  // Added and special tokens are matched first (longest at the leftmost place), the NFC normalizer
  // (Qwen2's; unicode_nfc.h) runs on the text between them, then the pre-tokenizer's splits (Split
  // regexes, ByteLevel's GPT-2 pattern) run by PCRE2 and the byte-level BPE model.
  // Appends the ids of `text` to `ids`; with `add_special_tokens`, inside the post-processor's
  // template (Llama-3: <|begin_of_text|> first), as tokenizers' encode(text). Text that is not
  // valid UTF-8 is an error naming the byte offset.
  absl::Status Encode(std::string_view text, bool add_special_tokens,
                      std::vector<int32_t>& ids) const;
  // The text of `ids` (the bytes they spell; an id of no token is an error naming it); special
  // tokens are left out with `skip_special_tokens`.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                                     bool skip_special_tokens) const;

  // The id of a token's text (an added token's content or a vocabulary spelling), or nullopt.
  std::optional<int32_t> TokenId(std::string_view token) const;
  int64_t vocab_size() const { return vocab_size_; }  // largest id + 1
  // tokenizer_config.json's chat_template (or chat_template.jinja beside it), else "".
  const std::string& chat_template() const { return chat_template_; }
  // tokenizer_config.json's bos_token / eos_token (FromDirectory), else nullopt.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
  };
  // One step of the post-processor's single-sequence template: a special token's ids, or the
  // encoded text ($A) when `ids` is empty.
  struct TemplatePiece {
    std::vector<int32_t> ids;
  };

  Tokenizer(BpeModel model) : model_(std::move(model)) {}
  absl::Status EncodeOrdinaryText(std::string_view text, std::vector<int32_t>& ids) const;

  BpeModel model_;
  std::vector<SplitRegex> splits_;        // applied in order, each to every piece of the one before
  std::vector<AddedToken> added_;         // longest content first
  std::array<bool, 256> starts_added_{};  // [b]: some added token's content starts with byte b
  std::unordered_map<int32_t, size_t> added_of_id_;  // id -> index in added_
  std::vector<TemplatePiece> template_;              // empty: the ids alone
  int64_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string chat_template_;
  bool nfc_ = false;  // tokenizer.json's "NFC" normalizer, applied to the text between added tokens
};

}  // namespace kelvin::data
