// TokenCorpus: token ids in a mapped file cut into documents (see token_corpus.h).
#include "data/corpus/token_corpus.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/check.h"

namespace kelvin::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read in place");

template <typename Stored>
void Widen(const char* bytes, std::span<int64_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    Stored value;
    std::memcpy(&value, bytes + i * sizeof(Stored), sizeof(Stored));
    out[i] = static_cast<int64_t>(value);
  }
}

}  // namespace

size_t TokenTypeSize(TokenType type) {
  switch (type) {
    case TokenType::kUInt8:
    case TokenType::kInt8:
      return 1;
    case TokenType::kInt16:
    case TokenType::kUInt16:
      return 2;
    case TokenType::kInt32:
      return 4;
    case TokenType::kInt64:
      return 8;
  }
  KELVIN_FATAL() << "unknown token type " << static_cast<int>(type);
}

std::string_view TokenTypeName(TokenType type) {
  switch (type) {
    case TokenType::kUInt8:
      return "uint8";
    case TokenType::kInt8:
      return "int8";
    case TokenType::kInt16:
      return "int16";
    case TokenType::kUInt16:
      return "uint16";
    case TokenType::kInt32:
      return "int32";
    case TokenType::kInt64:
      return "int64";
  }
  KELVIN_FATAL() << "unknown token type " << static_cast<int>(type);
}

TokenCorpus::TokenCorpus(io::MappedFile tokens, TokenType type,
                         std::vector<int64_t> document_starts)
    : tokens_(std::move(tokens)), type_(type), document_starts_(std::move(document_starts)) {
  KELVIN_CHECK(!document_starts_.empty() && document_starts_.front() == 0) << path();
  KELVIN_CHECK(std::is_sorted(document_starts_.begin(), document_starts_.end())) << path();
  KELVIN_CHECK_EQ(static_cast<size_t>(num_tokens()) * TokenTypeSize(type_), tokens_.size())
      << path();
}

int64_t TokenCorpus::document_start(int64_t document) const {
  KELVIN_CHECK(document >= 0 && document <= num_documents()) << document;
  return document_starts_[document];
}

int64_t TokenCorpus::DocumentAt(int64_t offset) const {
  KELVIN_CHECK(offset >= 0 && offset < num_tokens()) << offset;
  // The last document starting at or before `offset`: empty documents before it share its start.
  const auto after = std::upper_bound(document_starts_.begin(), document_starts_.end() - 1, offset);
  return (after - document_starts_.begin()) - 1;
}

void TokenCorpus::Read(int64_t begin, std::span<int64_t> out) const {
  const auto count = static_cast<int64_t>(out.size());
  KELVIN_CHECK(begin >= 0 && count >= 0 && begin + count <= num_tokens())
      << "tokens [" << begin << ", " << begin + count << ") of " << num_tokens();
  if (count == 0) return;
  const char* bytes = tokens_.data() + begin * TokenTypeSize(type_);
  switch (type_) {
    case TokenType::kUInt8:
      return Widen<uint8_t>(bytes, out);
    case TokenType::kInt8:
      return Widen<int8_t>(bytes, out);
    case TokenType::kInt16:
      return Widen<int16_t>(bytes, out);
    case TokenType::kUInt16:
      return Widen<uint16_t>(bytes, out);
    case TokenType::kInt32:
      return Widen<int32_t>(bytes, out);
    case TokenType::kInt64:
      return Widen<int64_t>(bytes, out);
  }
}

absl::Status TokenCorpus::CheckVocab(int64_t begin, std::span<const int64_t> tokens,
                                     int64_t vocab_size) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= 0 && tokens[i] < vocab_size) continue;
    const int64_t offset = begin + static_cast<int64_t>(i);
    const int64_t document = DocumentAt(offset);
    return absl::InvalidArgumentError(absl::StrFormat(
        "token file '%s': document %d, position %d holds token id %d, outside the vocabulary "
        "[0, %d); the corpus was tokenized with another tokenizer, or the model's vocab_size is "
        "wrong",
        path(), document, offset - document_starts_[document], tokens[i], vocab_size));
  }
  return absl::OkStatus();
}

absl::Status TokenCorpus::CheckVocab(int64_t vocab_size) const {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> chunk(kChunk);  // [kChunk]
  for (int64_t begin = 0; begin < num_tokens(); begin += kChunk) {
    const std::span<int64_t> tokens(chunk.data(), std::min(kChunk, num_tokens() - begin));
    Read(begin, tokens);
    KELVIN_RETURN_IF_ERROR(CheckVocab(begin, tokens, vocab_size));
  }
  return absl::OkStatus();
}

absl::Status TokenCorpus::AttachLossMask(TokenCorpus mask) {
  if (mask.num_documents() != num_documents() || mask.num_tokens() != num_tokens()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loss mask '%s' has %d documents of %d tokens, but the corpus '%s' has %d documents of %d "
        "tokens: the mask must be written from the same samples (kelvin prepare-data writes both)",
        mask.path(), mask.num_documents(), mask.num_tokens(), path(), num_documents(),
        num_tokens()));
  }
  for (int64_t d = 0; d < num_documents(); ++d) {
    if (mask.document_start(d + 1) == document_start(d + 1)) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "loss mask '%s': document %d has %d tokens, but document %d of the corpus '%s' has %d: the "
        "mask must be written from the same samples (kelvin prepare-data writes both)",
        mask.path(), d, mask.document_start(d + 1) - mask.document_start(d), d, path(),
        document_start(d + 1) - document_start(d)));
  }
  // A mask without a target would train on nothing (every step skipped, a held-out loss of 0).
  constexpr int64_t kChunk = int64_t{1} << 16;  // tokens read at a time; the scan stops at a target
  std::vector<int64_t> values;                  // [<= kChunk]
  bool any_target = false;
  for (int64_t begin = 0; begin < num_tokens() && !any_target; begin += kChunk) {
    values.resize(static_cast<size_t>(std::min(kChunk, num_tokens() - begin)));
    mask.Read(begin, values);
    any_target = std::find_if(values.begin(), values.end(), [](int64_t v) { return v != 0; }) !=
                 values.end();
  }
  if (!any_target) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loss mask '%s' marks none of the %d tokens of '%s' as a training target (every value is "
        "0): a run would learn nothing; mark the answers' tokens with 1 (prepare-data: labels "
        "other than -100, or loss_mask 1), or drop the loss mask to train on every token",
        mask.path(), num_tokens(), path()));
  }
  loss_mask_ = std::make_shared<const TokenCorpus>(std::move(mask));
  return absl::OkStatus();
}

absl::Status TokenCorpus::ReadLossMask(int64_t begin, std::span<uint8_t> out) const {
  KELVIN_CHECK(has_loss_mask()) << path();
  std::vector<int64_t> values(out.size());  // [count]
  loss_mask_->Read(begin, values);
  for (size_t i = 0; i < out.size(); ++i) {
    if (values[i] != 0 && values[i] != 1) {
      const int64_t offset = begin + static_cast<int64_t>(i);
      const int64_t document = DocumentAt(offset);
      return absl::InvalidArgumentError(absl::StrFormat(
          "loss mask '%s': document %d, position %d holds %d; a loss mask holds 0 (no loss on the "
          "token) or 1 (the token is a training target)",
          loss_mask_->path(), document, offset - document_starts_[document], values[i]));
    }
    out[i] = static_cast<uint8_t>(values[i]);
  }
  return absl::OkStatus();
}

}  // namespace kelvin::data
