// The flat token file: raw little-endian token ids and nothing else, int32 or uint16 as the
// extension says (.i32/.int32, .u16/.uint16) or as the caller chooses. One document, or documents
// each ended by a separator token (an end-of-text id: the separator is its document's last token).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "data/corpus/token_corpus.h"

namespace kelvin::data {

// kInt32 for ".i32"/".int32", kUInt16 for ".u16"/".uint16"; any other name is an error.
absl::StatusOr<TokenType> FlatTokenTypeFromPath(const std::string& path);

// The file as a corpus; its size must be a whole number of `type` tokens. Without a
// `document_separator`, one document; with it, a document ends after each occurrence (and the
// tokens after the last one are a document of their own), found by one scan of the file.
absl::StatusOr<TokenCorpus> OpenTokenFile(const std::string& path, TokenType type,
                                          std::optional<int64_t> document_separator = {});
// The same, with the type from the extension.
absl::StatusOr<TokenCorpus> OpenTokenFile(const std::string& path);

// Writes `tokens` as a flat file of `type` (kInt32 or kUInt16); a token that does not fit the type
// is an error naming its position.
absl::Status WriteTokenFile(const std::string& path, std::span<const int32_t> tokens,
                            TokenType type);

}  // namespace kelvin::data
