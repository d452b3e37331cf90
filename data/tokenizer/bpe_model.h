// The BPE model of a tokenizer.json: the vocabulary (spellings -> ids) and the merges by rank.
// A piece of text becomes one symbol per unit (a byte of a byte-level tokenizer, whose spellings
// are in GPT-2's byte alphabet, or a character otherwise), then the adjacent pair of lowest merge
// rank is merged, leftmost first, until no pair has a merge (as tokenizers' BPE). A unit with no
// token becomes its bytes' <0xNN> tokens (byte_fallback), else the unknown token (fused with the
// unknown units next to it under fuse_unk), else nothing: tokenizers drops it. With ignore_merges
// (Llama-3) a piece whose whole spelling is in the vocabulary is that one id.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

struct BpeOptions {
  bool byte_level = true;  // units are bytes spelled in the byte alphabet; else characters
  bool ignore_merges = false;
  bool byte_fallback = false;            // a unit with no token becomes <0xNN> tokens
  std::optional<std::string> unk_token;  // else a unit with no token (or fallback) is dropped
  bool fuse_unk = false;                 // consecutive unknown units are one unknown token
};

// Where an encode dropped a unit that no token spells (the first one), and how many.
struct DroppedUnits {
  int64_t count = 0;
  size_t first_offset = 0;  // byte offset of the first in the text given to Encode
  // false when the first was in a normalized or rewritten piece: first_offset is then where that
  // piece's part of the input starts, and the dropped unit is at or after it.
  bool first_exact = true;
};

// Lets a vocabulary be searched by string_view without a copy.
struct SpellingHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  using Vocab = std::unordered_map<std::string, int32_t, SpellingHash, std::equal_to<>>;

  // vocab: spelling -> id; merges: (left, right) spellings by rank (first = merged first). Each
  // merge's parts and their concatenation must be in the vocabulary, ids at most a small multiple
  // of the number of entries (the id table is that long), unk_token in the vocabulary: errors
  // name `source` and the entry.
  static absl::StatusOr<BpeModel> Create(
      Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      const BpeOptions& options, const std::string& source);

  // Appends the ids of `piece` (raw bytes, or characters of valid UTF-8) to `ids`; units dropped
  // are counted in `dropped`, their offsets relative to `piece` plus `piece_offset`.
  void Encode(std::string_view piece, size_t piece_offset, std::vector<int32_t>& ids,
              DroppedUnits& dropped) const;

  // The id of a spelling, or nullopt.
  std::optional<int32_t> Id(std::string_view spelling) const;
  // The spelling of `id`, or nullptr when the vocabulary has no such id.
  const std::string* Spelling(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(spellings_.size()) - 1; }
  int64_t entries() const { return static_cast<int64_t>(vocab_.size()); }
  // Byte-level: the bytes of [0, 256) whose character is not in the vocabulary.
  std::vector<int> MissingBytes() const;
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // the id of the pair's concatenation
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // The initial symbols of `piece` (one or more ids per unit, unknown units per the options).
  void InitialSymbols(std::string_view piece, size_t piece_offset, std::vector<int32_t>& symbols,
                      DroppedUnits& dropped) const;

  BpeOptions options_;
  Vocab vocab_;
  std::vector<std::string> spellings_;  // [max id + 1], "" where no token has the id
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};      // byte-level: the id of each byte's character, or -1
  std::array<int32_t, 256> fallback_ids_{};  // the id of "<0xNN>", or -1
  int32_t unk_id_ = -1;
};

}  // namespace kelvin::data
