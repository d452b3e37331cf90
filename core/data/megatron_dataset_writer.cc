// MegatronDatasetWriter: Megatron-LM's MMIDIDX .idx/.bin pair, written (see
// megatron_dataset_writer.h).
#include "core/data/megatron_dataset_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/data/mmap_indexed_dataset.h"
#include "core/io/mapped_file.h"

namespace kelvin::data {
namespace {

constexpr uint64_t kIndexVersion = 1;
constexpr const char* kPartial = ".partial";

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
  const std::string path = path_prefix + ".bin" + kPartial;
  std::FILE* bin = std::fopen(path.c_str(), "wb");
  if (bin == nullptr) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "cannot create Megatron data file '%s': %s; check that the directory exists and is "
        "writable",
        path, std::strerror(errno)));
  }
  return MegatronDatasetWriter(path_prefix, type, bin);
}

MegatronDatasetWriter::MegatronDatasetWriter(std::string path_prefix, TokenType type,
                                             std::FILE* bin)
    : path_prefix_(std::move(path_prefix)), type_(type), bin_(bin, &std::fclose) {
  document_indices_.push_back(0);
}

MegatronDatasetWriter::MegatronDatasetWriter(MegatronDatasetWriter&& other) noexcept
    : path_prefix_(std::move(other.path_prefix_)),
      type_(other.type_),
      bin_(std::move(other.bin_)),
      sequence_lengths_(std::move(other.sequence_lengths_)),
      document_indices_(std::move(other.document_indices_)),
      num_tokens_(other.num_tokens_),
      min_token_(other.min_token_),
      max_token_(other.max_token_),
      finished_(other.finished_),
      owns_partial_files_(other.owns_partial_files_) {
  other.owns_partial_files_ = false;
}

MegatronDatasetWriter::~MegatronDatasetWriter() {
  if (!owns_partial_files_) return;
  bin_.reset();
  std::error_code ignored;
  std::filesystem::remove(path_prefix_ + ".bin" + kPartial, ignored);
  std::filesystem::remove(path_prefix_ + ".idx" + kPartial, ignored);
}

absl::Status MegatronDatasetWriter::WriteError(const std::string& path) const {
  return absl::InternalError(
      absl::StrFormat("cannot write '%s': %s (disk full?)", path, std::strerror(errno)));
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
  if (std::fwrite(bytes.data(), 1, bytes.size(), bin_.get()) != bytes.size()) {
    return WriteError(path_prefix_ + ".bin" + kPartial);
  }
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
  const std::string bin_path = path_prefix_ + ".bin" + kPartial;
  const std::string rewritten_path = path_prefix_ + ".bin.rewritten" + kPartial;
  KELVIN_ASSIGN_OR_RETURN(io::MappedFile written, io::MappedFile::Open(bin_path));
  const TokenCorpus tokens(std::move(written), type_, {0, num_tokens_});
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(rewritten_path.c_str(), "wb"),
                                                      &std::fclose);
  if (out == nullptr) return WriteError(rewritten_path);
  const auto fail = [&] {
    const absl::Status error = WriteError(rewritten_path);  // before the cleanup changes errno
    out.reset();
    std::error_code ignored;
    std::filesystem::remove(rewritten_path, ignored);
    return error;
  };
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<int64_t> chunk(static_cast<size_t>(std::min(kChunk, num_tokens_)));  // [chunk]
  std::vector<char> bytes;  // [chunk * stored bytes]
  for (int64_t begin = 0; begin < num_tokens_; begin += kChunk) {
    const std::span<int64_t> part(chunk.data(), std::min(kChunk, num_tokens_ - begin));
    tokens.Read(begin, part);
    Narrow(part, stored, bytes);
    if (std::fwrite(bytes.data(), 1, bytes.size(), out.get()) != bytes.size()) return fail();
  }
  if (std::fclose(out.release()) != 0) return fail();
  std::error_code error;
  std::filesystem::rename(rewritten_path, bin_path, error);
  if (error) return fail();
  type_ = stored;
  return absl::OkStatus();
}

absl::Status MegatronDatasetWriter::FinishAs(TokenType stored) {
  KELVIN_CHECK(!finished_) << path_prefix_;
  if (document_indices_.back() != static_cast<int64_t>(sequence_lengths_.size())) EndDocument();
  const std::string bin_path = path_prefix_ + ".bin" + kPartial;
  const std::string idx_path = path_prefix_ + ".idx" + kPartial;
  if (std::fclose(bin_.release()) != 0) return WriteError(bin_path);
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
  std::FILE* idx = std::fopen(idx_path.c_str(), "wb");
  if (idx == nullptr) return WriteError(idx_path);
  const bool written = std::fwrite(index.data(), 1, index.size(), idx) == index.size();
  if ((std::fclose(idx) != 0) || !written) return WriteError(idx_path);
  finished_ = true;
  return absl::OkStatus();
}

absl::Status MegatronDatasetWriter::Commit() {
  KELVIN_CHECK(finished_ && owns_partial_files_) << path_prefix_ << ": Commit after Finish, once";
  std::error_code error;
  for (const char* extension : {".idx", ".bin"}) {
    const std::string path = path_prefix_ + extension;
    std::filesystem::rename(path + kPartial, path, error);
    if (error) {
      return absl::InternalError(absl::StrFormat("cannot rename the written '%s%s' to '%s': %s",
                                                 path, kPartial, path, error.message()));
    }
  }
  owns_partial_files_ = false;
  return absl::OkStatus();
}

}  // namespace kelvin::data
