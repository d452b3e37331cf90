// MegatronDatasetWriter: Megatron-LM's MMIDIDX .idx/.bin pair, written (see
// megatron_dataset_writer.h).
#include "data/corpus/megatron_dataset_writer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/io/mapped_file.h"
#include "data/corpus/mmap_indexed_dataset.h"

namespace kelvin::data {
namespace {

constexpr uint64_t kIndexVersion = 1;

// The range of token ids `type` stores.
std::pair<int64_t, int64_t> TokenRange(TokenType type) {
  switch (type) {
    case TokenType::kUInt8:
      return {0, std::numeric_limits<uint8_t>::max()};
    case TokenType::kInt8:
      return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case TokenType::kInt16:
      return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case TokenType::kUInt16:
      return {0, std::numeric_limits<uint16_t>::max()};
    case TokenType::kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case TokenType::kInt64:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
  KELVIN_FATAL() << "unknown token type " << static_cast<int>(type);
}

template <typename T>
void Append(std::vector<char>& bytes, T value) {
  const size_t at = bytes.size();
  bytes.resize(at + sizeof(T));
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

template <typename Stored>
void NarrowTo(std::span<const int64_t> tokens, std::vector<char>& bytes) {
  bytes.resize(tokens.size() * sizeof(Stored));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Stored value = static_cast<Stored>(tokens[i]);
    std::memcpy(bytes.data() + i * sizeof(Stored), &value, sizeof(Stored));
  }
}

// Narrows `tokens` into `bytes` as `type` (little-endian, checked by the caller's range test).
void Narrow(std::span<const int64_t> tokens, TokenType type, std::vector<char>& bytes) {
  switch (type) {
    case TokenType::kUInt8:
      return NarrowTo<uint8_t>(tokens, bytes);
    case TokenType::kInt8:
      return NarrowTo<int8_t>(tokens, bytes);
    case TokenType::kInt16:
      return NarrowTo<int16_t>(tokens, bytes);
    case TokenType::kUInt16:
      return NarrowTo<uint16_t>(tokens, bytes);
    case TokenType::kInt32:
      return NarrowTo<int32_t>(tokens, bytes);
    case TokenType::kInt64:
      return NarrowTo<int64_t>(tokens, bytes);
  }
}

}  // namespace

absl::StatusOr<MegatronDatasetWriter> MegatronDatasetWriter::Create(const std::string& path_prefix,
                                                                    TokenType type) {
  absl::StatusOr<io::AtomicFile> bin = io::AtomicFile::Create(path_prefix + ".bin");
  if (!bin.ok()) {
    return absl::Status(bin.status().code(),
                        absl::StrCat("Megatron data file: ", bin.status().message()));
  }
  return MegatronDatasetWriter(path_prefix, type, std::move(bin).value());
}

MegatronDatasetWriter::MegatronDatasetWriter(std::string path_prefix, TokenType type,
                                             io::AtomicFile bin)
    : path_prefix_(std::move(path_prefix)), type_(type), bin_(std::move(bin)) {
  document_indices_.push_back(0);
}

absl::Status MegatronDatasetWriter::AddSequence(std::span<const int64_t> tokens) {
  KELVIN_CHECK(!finished_) << path_prefix_;
  const auto [lowest, highest] = TokenRange(type_);
  int64_t min_token = min_token_, max_token = max_token_;  // kept only if the sequence is written
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < lowest || tokens[i] > highest) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Megatron dataset '%s': token %d (position %d of sequence %d) does not fit %s",
          path_prefix_, tokens[i], i, sequence_lengths_.size(), TokenTypeName(type_)));
    }
    min_token = std::min(min_token, tokens[i]);
    max_token = std::max(max_token, tokens[i]);
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Megatron dataset '%s': a sequence of %d tokens is longer than the .idx's int32 lengths "
        "hold",
        path_prefix_, tokens.size()));
  }
  std::vector<char> bytes;  // [count * token bytes]
  Narrow(tokens, type_, bytes);
  KELVIN_RETURN_IF_ERROR(bin_.Write({bytes.data(), bytes.size()}));
  sequence_lengths_.push_back(static_cast<int32_t>(tokens.size()));
  num_tokens_ += static_cast<int64_t>(tokens.size());
  min_token_ = min_token;
  max_token_ = max_token;
  return absl::OkStatus();
}

void MegatronDatasetWriter::EndDocument() {
  document_indices_.push_back(static_cast<int64_t>(sequence_lengths_.size()));
}

absl::Status MegatronDatasetWriter::Finish() { return FinishAs(type_); }

absl::Status MegatronDatasetWriter::RewriteBinAs(TokenType stored) {
  const auto [lowest, highest] = TokenRange(stored);
  if (num_tokens_ > 0 && (min_token_ < lowest || max_token_ > highest)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Megatron dataset '%s': tokens %d to %d do not fit %s", path_prefix_,
                        min_token_, max_token_, TokenTypeName(stored)));
  }
  KELVIN_ASSIGN_OR_RETURN(io::MappedFile written, io::MappedFile::Open(bin_.temporary()));
  const TokenCorpus tokens(std::move(written), type_, {0, num_tokens_});
  KELVIN_ASSIGN_OR_RETURN(io::AtomicFile narrowed, io::AtomicFile::Create(path_prefix_ + ".bin"));
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<int64_t> chunk(static_cast<size_t>(std::min(kChunk, num_tokens_)));  // [chunk]
  std::vector<char> bytes;  // [chunk * stored bytes]
  for (int64_t begin = 0; begin < num_tokens_; begin += kChunk) {
    const std::span<int64_t> part(chunk.data(), std::min(kChunk, num_tokens_ - begin));
    tokens.Read(begin, part);
    Narrow(part, stored, bytes);
    KELVIN_RETURN_IF_ERROR(narrowed.Write({bytes.data(), bytes.size()}));
  }
  KELVIN_RETURN_IF_ERROR(narrowed.Finish());
  bin_ = std::move(narrowed);  // the wide temporary is removed
  type_ = stored;
  return absl::OkStatus();
}

absl::Status MegatronDatasetWriter::FinishAs(TokenType stored) {
  KELVIN_CHECK(!finished_) << path_prefix_;
  if (document_indices_.back() != static_cast<int64_t>(sequence_lengths_.size())) EndDocument();
  KELVIN_RETURN_IF_ERROR(bin_.Finish());
  if (stored != type_) KELVIN_RETURN_IF_ERROR(RewriteBinAs(stored));

  std::vector<char> index;  // the whole .idx
  index.insert(index.end(), kMegatronIndexMagic, kMegatronIndexMagic + kMegatronIndexMagicBytes);
  Append(index, kIndexVersion);
  Append(index, MegatronDTypeCode(type_));
  Append(index, static_cast<uint64_t>(sequence_lengths_.size()));
  Append(index, static_cast<uint64_t>(document_indices_.size()));
  for (const int32_t length : sequence_lengths_) Append(index, length);
  int64_t pointer = 0;  // byte offset of each sequence in the .bin
  for (const int32_t length : sequence_lengths_) {
    Append(index, pointer);
    pointer += static_cast<int64_t>(length) * static_cast<int64_t>(TokenTypeSize(type_));
  }
  for (const int64_t document : document_indices_) Append(index, document);
  KELVIN_ASSIGN_OR_RETURN(io::AtomicFile idx, io::AtomicFile::Create(path_prefix_ + ".idx"));
  KELVIN_RETURN_IF_ERROR(idx.Write({index.data(), index.size()}));
  KELVIN_RETURN_IF_ERROR(idx.Finish());
  idx_ = std::move(idx);
  finished_ = true;
  return absl::OkStatus();
}

absl::Status MegatronDatasetWriter::Commit() { return CommitTogether({this}); }

absl::Status MegatronDatasetWriter::CommitTogether(
    const std::vector<MegatronDatasetWriter*>& datasets) {
  std::vector<io::AtomicFile*> files;
  for (MegatronDatasetWriter* dataset : datasets) {
    KELVIN_CHECK(dataset->finished_ && dataset->idx_.has_value())
        << dataset->path_prefix_ << ": commit after Finish, once";
    files.push_back(&dataset->bin_);
    files.push_back(&*dataset->idx_);
  }
  return io::CommitTogether(files);
}

}  // namespace kelvin::data
