// TokenCorpus: a stream of integer token ids in one mapped file, cut into documents, with an
// optional loss mask. The Megatron indexed dataset and the flat token file both load into one;
// samplers read rows of it. D documents, N tokens; document d covers stream tokens
// [start(d), start(d + 1)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/io/mapped_file.h"
#include "core/status.h"

namespace kelvin::data {

// How token ids are stored on disk (little-endian).
enum class TokenType : uint8_t { kUInt8, kInt8, kInt16, kUInt16, kInt32, kInt64 };

size_t TokenTypeSize(TokenType type);
std::string_view TokenTypeName(TokenType type);  // "uint16", "int32", ...

class TokenCorpus {
 public:
  // tokens: the whole mapped file, N * TokenTypeSize(type) bytes. document_starts [D + 1]:
  // non-decreasing from 0 to N (loaders validate; a broken invariant here is a programmer error).
  TokenCorpus(io::MappedFile tokens, TokenType type, std::vector<int64_t> document_starts);

  const std::string& path() const { return tokens_.path(); }
  TokenType token_type() const { return type_; }
  int64_t num_tokens() const { return document_starts_.back(); }
  int64_t num_documents() const { return static_cast<int64_t>(document_starts_.size()) - 1; }
  // Stream offset of document d's first token, d in [0, D]; start(D) == N.
  int64_t document_start(int64_t document) const;
  // The non-empty document holding stream token `offset` in [0, N).
  int64_t DocumentAt(int64_t offset) const;

  // Stream tokens [begin, begin + out.size()) widened to int64; out [count].
  void Read(int64_t begin, std::span<int64_t> out) const;

  // OK when every one of `tokens` (stream tokens [begin, begin + tokens.size())) lies in
  // [0, vocab_size); otherwise the error names the file, document, position and value.
  absl::Status CheckVocab(int64_t begin, std::span<const int64_t> tokens, int64_t vocab_size) const;
  // The same over the whole corpus (a full scan: for validating a corpus before a job).
  absl::Status CheckVocab(int64_t vocab_size) const;

  // Attaches `mask` as this corpus's loss mask (fine-tuning data): a second corpus of the same
  // documents whose token i is 1 when stream token i is a training target (its prediction counts
  // in the loss) and 0 when it is not (a prompt, a system message). Its documents must have the
  // same lengths, else the error names both files and the first document that differs; a mask
  // of zeros only (no target: nothing to learn) is an error too.
  absl::Status AttachLossMask(TokenCorpus mask);
  bool has_loss_mask() const { return loss_mask_ != nullptr; }
  // Whether (1) or not (0) each of stream tokens [begin, begin + out.size()) is a training target;
  // a mask value other than 0 or 1 is an error naming the mask file, document and position. Needs a
  // loss mask.
  absl::Status ReadLossMask(int64_t begin, std::span<uint8_t> out) const;

 private:
  io::MappedFile tokens_;
  TokenType type_;
  std::vector<int64_t> document_starts_;          // [D + 1]
  std::shared_ptr<const TokenCorpus> loss_mask_;  // null without one
};

}  // namespace kelvin::data
