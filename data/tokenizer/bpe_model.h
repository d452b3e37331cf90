// The BPE model of a byte-level tokenizer.json: the vocabulary (byte-level spellings -> ids) and
// the merges by rank. A piece of text (a pre-token, raw bytes) becomes its bytes' single-character
// ids, then the adjacent pair of lowest merge rank is merged, leftmost first, until no pair has a
// merge (as tokenizers' BPE); with ignore_merges (Llama-3) a piece whose whole spelling is in the
// vocabulary is that one id.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

class BpeModel {
 public:
  // vocab: spelling -> id; merges: (left, right) spellings by rank (first = merged first). Every
  // byte's character must be in the vocabulary (else this is not byte-level BPE), and each merge's
  // parts and their concatenation too: errors name `source` and the entry.
  static absl::StatusOr<BpeModel> Create(
      std::unordered_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
      const std::string& source);

  // Appends the ids of `piece` (raw bytes) to `ids`.
  void Encode(std::string_view piece, std::vector<int32_t>& ids) const;

  // The id of a byte-level spelling, or nullopt.
  std::optional<int32_t> Id(std::string_view spelling) const;
  // The byte-level spelling of `id`, or nullptr when the vocabulary has no such id.
  const std::string* Spelling(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(spellings_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // the id of the pair's concatenation
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> spellings_;  // [max id + 1], "" where no token has the id
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_ = false;
};

}  // namespace kelvin::data
