// Megatron-LM's indexed dataset (the MMIDIDX .idx/.bin pair that Megatron's
// tools/preprocess_data.py writes), read in place and validated field by field, as a TokenCorpus
// of Megatron's documents (each the concatenation of its sequences).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "data/corpus/token_corpus.h"

namespace kelvin::data {

// The .idx layout (megatron/core/datasets/indexed_dataset.py, _IndexWriter), little-endian:
//   magic "MMIDIDX\0\0" (9 bytes), u64 version = 1, u8 dtype code, u64 sequence_count S,
//   u64 document_count D, i32 sequence_lengths [S], i64 sequence_pointers [S] (byte offsets in
//   the .bin), i64 document_indices [D] (0, then the sequence index ending each document), and for
//   multimodal datasets i8 sequence_modes [S] (ignored). The .bin holds the tokens of the
//   sequences back to back.
inline constexpr char kMegatronIndexMagic[] = "MMIDIDX\0\0";  // 9 bytes, without the final NUL
inline constexpr size_t kMegatronIndexMagicBytes = 9;
inline constexpr size_t kMegatronIndexHeaderBytes = 34;  // magic, version, dtype, S, D

// Megatron's DType code of `type` (the .idx header's byte 17): 1 uint8, 2 int8, 3 int16,
// 4 int32, 5 int64, 8 uint16.
uint8_t MegatronDTypeCode(TokenType type);

// Opens `path_prefix`.idx and `path_prefix`.bin (a trailing ".idx" or ".bin" on the prefix is
// dropped). Every field is checked against the files: a corrupted or mismatched pair is an error
// naming the file, the field and its value.
absl::StatusOr<TokenCorpus> OpenMegatronDataset(std::string path_prefix);

}  // namespace kelvin::data
