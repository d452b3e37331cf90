// Megatron-LM's indexed dataset, read in place and validated (see mmap_indexed_dataset.h).
#include "data/corpus/mmap_indexed_dataset.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/io/mapped_file.h"

namespace kelvin::data {
namespace {

constexpr uint64_t kMegatronIndexVersion = 1;

template <typename T>
T LoadAt(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

// Megatron's DType enum codes of the integer token types (6 float64 and 7 float32 have none).
constexpr std::pair<uint8_t, TokenType> kTokenTypeCodes[] = {
    {1, TokenType::kUInt8}, {2, TokenType::kInt8},  {3, TokenType::kInt16},
    {4, TokenType::kInt32}, {5, TokenType::kInt64}, {8, TokenType::kUInt16}};

std::optional<TokenType> TokenTypeOfCode(uint8_t code) {
  for (const auto& [known, type] : kTokenTypeCodes) {
    if (known == code) return type;
  }
  return std::nullopt;
}

// "Megatron index file 'x.idx': <detail>" as an InvalidArgument status.
template <typename... Args>
absl::Status IndexError(const std::string& path, const absl::FormatSpec<Args...>& format,
                        const Args&... args) {
  return absl::InvalidArgumentError(
      absl::StrCat("Megatron index file '", path, "': ", absl::StrFormat(format, args...)));
}

// The .idx arrays, in place in the mapping (unaligned: read through LoadAt).
struct IndexArrays {
  uint64_t sequence_count = 0;
  uint64_t document_count = 0;
  const uint8_t* sequence_lengths = nullptr;   // i32 [S]
  const uint8_t* sequence_pointers = nullptr;  // i64 [S]
  const uint8_t* document_indices = nullptr;   // i64 [D]
  int32_t length(uint64_t i) const { return LoadAt<int32_t>(sequence_lengths + 4 * i); }
  int64_t pointer(uint64_t i) const { return LoadAt<int64_t>(sequence_pointers + 8 * i); }
  int64_t document_index(uint64_t i) const { return LoadAt<int64_t>(document_indices + 8 * i); }
};

absl::StatusOr<TokenType> ParseHeader(const io::MappedFile& idx, IndexArrays& arrays) {
  const std::string& path = idx.path();
  const auto* bytes = reinterpret_cast<const uint8_t*>(idx.data());
  if (idx.size() < kMegatronIndexHeaderBytes) {
    return IndexError(path,
                      "is %d bytes, shorter than the %d-byte header: truncated, or not a "
                      "Megatron-LM .idx file",
                      idx.size(), kMegatronIndexHeaderBytes);
  }
  if (std::memcmp(bytes, kMegatronIndexMagic, kMegatronIndexMagicBytes) != 0) {
    const absl::string_view found(reinterpret_cast<const char*>(bytes), kMegatronIndexMagicBytes);
    return IndexError(path,
                      "starts with \"%s\", not the magic \"MMIDIDX\\x00\\x00\": not a Megatron-LM "
                      "indexed dataset (.idx written by tools/preprocess_data.py)",
                      absl::CHexEscape(found));
  }
  const auto version = LoadAt<uint64_t>(bytes + 9);
  if (version != kMegatronIndexVersion) {
    return IndexError(path, "field 'version' is %d; Megatron-LM writes (and Kelvin reads) only 1",
                      version);
  }
  const auto dtype_code = LoadAt<uint8_t>(bytes + 17);
  const std::optional<TokenType> type = TokenTypeOfCode(dtype_code);
  if (!type.has_value()) {
    return IndexError(path,
                      "field 'dtype' is code %d, not an integer token type (Megatron codes: "
                      "1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16; 6 float64 and "
                      "7 float32 are not token ids)",
                      dtype_code);
  }
  arrays.sequence_count = LoadAt<uint64_t>(bytes + 18);
  arrays.document_count = LoadAt<uint64_t>(bytes + 26);
  const uint64_t s = arrays.sequence_count;
  const uint64_t d = arrays.document_count;
  if (d == 0) {
    return IndexError(path,
                      "field 'document_count' is 0, but the document indices always hold at "
                      "least the leading 0: corrupted");
  }
  // S and D at most the file size keep 34 + 12 S + 8 D + S far from overflowing.
  const uint64_t size = idx.size();
  const bool counts_fit = s <= size && d <= size;
  const uint64_t needed = counts_fit ? kMegatronIndexHeaderBytes + 12 * s + 8 * d : 0;
  if (!counts_fit || size < needed) {
    const double needed_bytes = kMegatronIndexHeaderBytes + 12.0 * s + 8.0 * d;
    return IndexError(path,
                      "fields 'sequence_count' %d and 'document_count' %d need %.0f bytes, but "
                      "the file has %d: truncated, or the counts are corrupted",
                      s, d, needed_bytes, size);
  }
  if (size != needed && size != needed + s) {  // + S: a multimodal dataset's sequence modes
    return IndexError(path,
                      "is %d bytes, but 'sequence_count' %d and 'document_count' %d describe %d "
                      "bytes (or %d with multimodal sequence modes): corrupted",
                      size, s, d, needed, needed + s);
  }
  arrays.sequence_lengths = bytes + kMegatronIndexHeaderBytes;
  arrays.sequence_pointers = arrays.sequence_lengths + 4 * s;
  arrays.document_indices = arrays.sequence_pointers + 8 * s;
  return *type;
}

// Sequences must lie in the .bin back to back, in order, as Megatron's writer places them.
absl::Status CheckSequences(const std::string& idx_path, const IndexArrays& arrays,
                            const io::MappedFile& bin, TokenType type) {
  const auto token_bytes = static_cast<int64_t>(TokenTypeSize(type));
  const auto bin_size = static_cast<int64_t>(bin.size());
  int64_t expected_pointer = 0;
  for (uint64_t i = 0; i < arrays.sequence_count; ++i) {
    const int32_t length = arrays.length(i);
    const int64_t pointer = arrays.pointer(i);
    if (length < 0) {
      return IndexError(idx_path, "sequence_lengths[%d] is %d, a negative length: corrupted", i,
                        length);
    }
    if (pointer < 0 || pointer > bin_size || pointer + length * token_bytes > bin_size) {
      return IndexError(idx_path,
                        "sequence_pointers[%d] = %d with sequence_lengths[%d] = %d (%s tokens) "
                        "reaches past the end of '%s' (%d bytes): the .bin is truncated, or the "
                        ".idx does not belong to it",
                        i, pointer, i, length, TokenTypeName(type), bin.path(), bin_size);
    }
    if (pointer != expected_pointer) {
      return IndexError(idx_path,
                        "sequence_pointers[%d] is %d, but the lengths before it place sequence %d "
                        "at byte %d of the .bin: corrupted",
                        i, pointer, i, expected_pointer);
    }
    expected_pointer += length * token_bytes;
  }
  if (expected_pointer != bin_size) {
    return IndexError(idx_path,
                      "its sequences cover %d bytes, but '%s' has %d: the .idx and .bin do not "
                      "belong together",
                      expected_pointer, bin.path(), bin_size);
  }
  return absl::OkStatus();
}

// document_indices: 0, non-decreasing, ending at S. Returns each document's first token [D].
absl::StatusOr<std::vector<int64_t>> DocumentStarts(const std::string& idx_path,
                                                    const IndexArrays& arrays, TokenType type,
                                                    int64_t num_tokens) {
  const auto s = static_cast<int64_t>(arrays.sequence_count);
  const auto token_bytes = static_cast<int64_t>(TokenTypeSize(type));
  std::vector<int64_t> starts(arrays.document_count);  // [D]
  int64_t previous = 0;
  for (uint64_t i = 0; i < arrays.document_count; ++i) {
    const int64_t sequence = arrays.document_index(i);
    if (i == 0 && sequence != 0) {
      return IndexError(idx_path, "document_indices[0] is %d, but it must be 0: corrupted",
                        sequence);
    }
    if (sequence < previous || sequence > s) {
      return IndexError(idx_path,
                        "document_indices[%d] is %d, outside [%d, %d] (they must not decrease "
                        "and stay within sequence_count): corrupted",
                        i, sequence, previous, s);
    }
    starts[i] = sequence == s ? num_tokens : arrays.pointer(sequence) / token_bytes;
    previous = sequence;
  }
  if (previous != s) {
    return IndexError(idx_path,
                      "the last document index is %d, but it must equal 'sequence_count' %d: "
                      "corrupted",
                      previous, s);
  }
  return starts;
}

}  // namespace

uint8_t MegatronDTypeCode(TokenType type) {
  for (const auto& [code, known] : kTokenTypeCodes) {
    if (known == type) return code;
  }
  KELVIN_FATAL() << "token type " << TokenTypeName(type) << " has no Megatron dtype code";
}

absl::StatusOr<TokenCorpus> OpenMegatronDataset(std::string path_prefix) {
  for (const char* suffix : {".idx", ".bin"}) {
    if (absl::EndsWith(path_prefix, suffix)) path_prefix.resize(path_prefix.size() - 4);
  }
  KELVIN_ASSIGN_OR_RETURN(io::MappedFile idx,
                          io::MappedFile::Open(path_prefix + ".idx", "Megatron index file"));
  IndexArrays arrays;
  KELVIN_ASSIGN_OR_RETURN(const TokenType type, ParseHeader(idx, arrays));
  KELVIN_ASSIGN_OR_RETURN(io::MappedFile bin,
                          io::MappedFile::Open(path_prefix + ".bin", "Megatron data file"));
  KELVIN_RETURN_IF_ERROR(CheckSequences(idx.path(), arrays, bin, type));
  const auto num_tokens = static_cast<int64_t>(bin.size() / TokenTypeSize(type));
  KELVIN_ASSIGN_OR_RETURN(std::vector<int64_t> starts,
                          DocumentStarts(idx.path(), arrays, type, num_tokens));
  return TokenCorpus(std::move(bin), type, std::move(starts));
}

}  // namespace kelvin::data
