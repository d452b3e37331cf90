// The flat token file: raw little-endian token ids (see token_file.h).
#include "data/corpus/token_file.h"

#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/io/atomic_file.h"
#include "core/io/mapped_file.h"

namespace kelvin::data {

absl::StatusOr<TokenType> FlatTokenTypeFromPath(const std::string& path) {
  for (const char* suffix : {".i32", ".int32"}) {
    if (absl::EndsWith(path, suffix)) return TokenType::kInt32;
  }
  for (const char* suffix : {".u16", ".uint16"}) {
    if (absl::EndsWith(path, suffix)) return TokenType::kUInt16;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "token file '%s': cannot tell the token type from the name; end it in .i32 (int32 tokens) "
      "or .u16 (uint16 tokens), or give the type explicitly",
      path));
}

namespace {

// Document starts [D + 1] of `num_tokens` little-endian `Token`s at `bytes`: 0, the position after
// each separator, and num_tokens.
template <typename Token>
std::vector<int64_t> DocumentStartsAfter(const char* bytes, int64_t num_tokens, int64_t separator) {
  std::vector<int64_t> starts = {0};
  for (int64_t i = 0; i < num_tokens; ++i) {
    Token token;
    std::memcpy(&token, bytes + i * static_cast<int64_t>(sizeof(Token)), sizeof(Token));
    if (static_cast<int64_t>(token) == separator && i + 1 < num_tokens) starts.push_back(i + 1);
  }
  starts.push_back(num_tokens);
  return starts;
}

}  // namespace

absl::StatusOr<TokenCorpus> OpenTokenFile(const std::string& path, TokenType type,
                                          std::optional<int64_t> document_separator) {
  KELVIN_ASSIGN_OR_RETURN(io::MappedFile file, io::MappedFile::Open(path, "token file"));
  const size_t token_bytes = TokenTypeSize(type);
  if (file.size() % token_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token file '%s' is %d bytes, not a whole number of %d-byte %s tokens: truncated, or "
        "written with another token type",
        path, file.size(), token_bytes, TokenTypeName(type)));
  }
  const auto num_tokens = static_cast<int64_t>(file.size() / token_bytes);
  if (!document_separator.has_value()) return TokenCorpus(std::move(file), type, {0, num_tokens});
  std::vector<int64_t> starts;
  if (type == TokenType::kInt32) {
    starts = DocumentStartsAfter<int32_t>(file.data(), num_tokens, *document_separator);
  } else if (type == TokenType::kUInt16) {
    starts = DocumentStartsAfter<uint16_t>(file.data(), num_tokens, *document_separator);
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("token file '%s': flat token files are int32 or uint16, not %s", path,
                        TokenTypeName(type)));
  }
  return TokenCorpus(std::move(file), type, std::move(starts));
}

absl::StatusOr<TokenCorpus> OpenTokenFile(const std::string& path) {
  KELVIN_ASSIGN_OR_RETURN(const TokenType type, FlatTokenTypeFromPath(path));
  return OpenTokenFile(path, type);
}

absl::Status WriteTokenFile(const std::string& path, std::span<const int32_t> tokens,
                            TokenType type) {
  std::vector<uint8_t> bytes;  // [N * token bytes]
  if (type == TokenType::kInt32) {
    bytes.resize(tokens.size() * sizeof(int32_t));
    if (!tokens.empty()) std::memcpy(bytes.data(), tokens.data(), bytes.size());
  } else if (type == TokenType::kUInt16) {
    bytes.resize(tokens.size() * sizeof(uint16_t));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] > std::numeric_limits<uint16_t>::max()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "token file '%s': token %d at position %d does not fit uint16; write int32 (.i32)",
            path, tokens[i], i));
      }
      const auto value = static_cast<uint16_t>(tokens[i]);
      std::memcpy(bytes.data() + 2 * i, &value, 2);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("token file '%s': flat token files are int32 or uint16, not %s", path,
                        TokenTypeName(type)));
  }
  return io::WriteFileAtomically(
      path, {std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())});
}

}  // namespace kelvin::data
