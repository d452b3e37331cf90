// BPE merging with a min-heap of candidate pairs over a linked list of symbols: O(n log n) in the
// piece's length, so one long run of letters (a single pre-token) costs no quadratic time.
#include "data/tokenizer/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "data/tokenizer/byte_level.h"

namespace kelvin::data {

absl::StatusOr<BpeModel> BpeModel::Create(
    std::unordered_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
    const std::string& source) {
  BpeModel model;
  model.ignore_merges_ = ignore_merges;
  int32_t max_id = -1;
  for (const auto& [spelling, id] : vocab) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " model.vocab: \"", spelling, "\" has the negative id ", id));
    }
    if (spelling.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " model.vocab: id ", id, " has an empty spelling"));
    }
    max_id = std::max(max_id, id);
  }
  model.spellings_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [spelling, id] : vocab) {
    if (!model.spellings_[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, " model.vocab: id ", id,
                                                     " is given to both \"", model.spellings_[id],
                                                     "\" and \"", spelling, "\""));
    }
    model.spellings_[id] = spelling;
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    AppendByteLevelChar(static_cast<uint8_t>(b), spelling);
    const auto it = vocab.find(spelling);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, " model.vocab has no token for byte ", b, " (\"", spelling,
          "\"): Kelvin reads byte-level BPE tokenizers (Llama-3, GPT-2, Qwen2), whose vocabulary "
          "spells every byte"));
    }
    model.byte_ids_[b] = it->second;
  }
  model.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(source, " model.merges[", rank, "] \"", left,
                                                     " ", right, "\": \"",
                                                     l == vocab.end()   ? left
                                                     : r == vocab.end() ? right
                                                                        : left + right,
                                                     "\" is not in the vocabulary"));
    }
    // A repeated merge keeps its first (lowest) rank, as tokenizers does.
    model.merges_.try_emplace(PairKey(l->second, r->second),
                              Merge{static_cast<int32_t>(rank), m->second});
  }
  model.vocab_ = std::move(vocab);
  return model;
}

std::optional<int32_t> BpeModel::Id(std::string_view spelling) const {
  const auto it = vocab_.find(std::string(spelling));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::Spelling(int32_t id) const {
  if (id < 0 || id > max_id() || spellings_[id].empty()) return nullptr;
  return &spellings_[id];
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    std::string spelling;
    for (const char c : piece) AppendByteLevelChar(static_cast<uint8_t>(c), spelling);
    const auto whole = vocab_.find(spelling);
    if (whole != vocab_.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  if (piece.size() == 1) {
    ids.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  // symbols [n]: the piece's bytes' ids, linked; a merged-away symbol has id -1.
  struct Symbol {
    int32_t id, prev, next;
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  struct Candidate {
    int32_t rank, left;  // the pair (left, symbols[left].next)
    int32_t left_id, right_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int32_t right = symbols[left].next;
    const auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) {
      queue.push({it->second.rank, left, symbols[left].id, symbols[right].id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Stale: one side was merged since the pair was offered.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    const int32_t right = left.next;
    left.id = merges_.at(PairKey(c.left_id, c.right_id)).merged;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    symbols[right].id = -1;
    offer(left.prev);
    offer(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace kelvin::data
