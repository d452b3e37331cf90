// The flat token file: raw little-endian token ids and nothing else (one document), int32 or
// uint16 as the extension says (.i32/.int32, .u16/.uint16) or as the caller chooses.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/data/token_corpus.h"
#include "core/status.h"

namespace kelvin::data {

// kInt32 for ".i32"/".int32", kUInt16 for ".u16"/".uint16"; any other name is an error.
absl::StatusOr<TokenType> FlatTokenTypeFromPath(const std::string& path);

// The file as a corpus of one document; its size must be a whole number of `type` tokens.
absl::StatusOr<TokenCorpus> OpenTokenFile(const std::string& path, TokenType type);
// The same, with the type from the extension.
absl::StatusOr<TokenCorpus> OpenTokenFile(const std::string& path);

// Writes `tokens` as a flat file of `type` (kInt32 or kUInt16); a token that does not fit the type
// is an error naming its position.
absl::Status WriteTokenFile(const std::string& path, std::span<const int32_t> tokens,
                            TokenType type);

}  // namespace kelvin::data
