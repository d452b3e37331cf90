// BPE merging with a min-heap of candidate pairs over a linked list of symbols: O(n log n) in the
// piece's length, so one long run of letters (a single pre-token) costs no quadratic time.
#include "data/tokenizer/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

// A vocabulary's id table has max id + 1 entries: ids beyond this many per entry (plus a margin
// for small vocabularies) cannot be a real vocabulary, and would allocate gigabytes.
constexpr int64_t kMaxIdsPerEntry = 2;
constexpr int64_t kIdMargin = 1024;

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Create(
    Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    const BpeOptions& options, const std::string& source) {
  BpeModel model;
  model.options_ = options;
  const int64_t id_limit = kMaxIdsPerEntry * static_cast<int64_t>(vocab.size()) + kIdMargin;
  int32_t max_id = -1;
  for (const auto& [spelling, id] : vocab) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " model.vocab: \"", spelling, "\" has the negative id ", id));
    }
    if (id >= id_limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, " model.vocab[\"", spelling.substr(0, 80), "\"] has the id ", id, ", but the ",
          "vocabulary has ", vocab.size(), " entries: ids must be below ", id_limit,
          " (2 per entry + 1024); the file is damaged or not a tokenizer.json"));
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
    model.byte_ids_[b] = it == vocab.end() ? -1 : it->second;
    const auto fallback = vocab.find(absl::StrFormat("<0x%02X>", b));
    model.fallback_ids_[b] = fallback == vocab.end() ? -1 : fallback->second;
  }
  if (options.unk_token.has_value()) {
    const auto it = vocab.find(*options.unk_token);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, " model.unk_token \"", *options.unk_token, "\" is not in model.vocab"));
    }
    model.unk_id_ = it->second;
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
  const auto it = vocab_.find(spelling);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::Spelling(int32_t id) const {
  if (id < 0 || id > max_id() || spellings_[id].empty()) return nullptr;
  return &spellings_[id];
}

std::vector<int> BpeModel::MissingBytes() const {
  std::vector<int> missing;
  if (!options_.byte_level) return missing;
  for (int b = 0; b < 256; ++b) {
    if (byte_ids_[b] < 0) missing.push_back(b);
  }
  return missing;
}

void BpeModel::InitialSymbols(std::string_view piece, size_t piece_offset,
                              std::vector<int32_t>& symbols, DroppedUnits& dropped) const {
  // tokenizers appends a pending unknown token only before the next unit that the vocabulary
  // spells, or at the end: byte-fallback tokens in between come before it. Kept for parity.
  bool unk_pending = false;
  const auto known = [&](int32_t id) {
    if (unk_pending) symbols.push_back(unk_id_);
    unk_pending = false;
    symbols.push_back(id);
  };
  const auto unknown = [&](std::string_view unit_bytes, size_t at) {
    if (options_.byte_fallback) {
      bool spelled = true;
      for (const char c : unit_bytes) spelled &= fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (spelled) {
        for (const char c : unit_bytes) symbols.push_back(fallback_ids_[static_cast<uint8_t>(c)]);
        return;
      }
    }
    if (unk_id_ < 0) {
      if (dropped.count++ == 0) dropped.first_offset = piece_offset + at;
      return;
    }
    if (unk_pending && !options_.fuse_unk) symbols.push_back(unk_id_);
    unk_pending = true;
  };
  if (options_.byte_level) {
    for (size_t i = 0; i < piece.size(); ++i) {
      const uint8_t b = static_cast<uint8_t>(piece[i]);
      if (byte_ids_[b] >= 0) {
        known(byte_ids_[b]);
      } else {
        std::string spelling;  // the byte's character: byte fallback spells its UTF-8 bytes
        AppendByteLevelChar(b, spelling);
        unknown(spelling, i);
      }
    }
  } else {
    for (size_t i = 0, length = 0; i < piece.size(); i += length) {
      length = std::min(Utf8Length(static_cast<uint8_t>(piece[i])), piece.size() - i);
      const std::string_view unit = piece.substr(i, length);
      const auto it = vocab_.find(unit);
      if (it != vocab_.end()) {
        known(it->second);
      } else {
        unknown(unit, i);
      }
    }
  }
  if (unk_pending) symbols.push_back(unk_id_);
}

void BpeModel::Encode(std::string_view piece, size_t piece_offset, std::vector<int32_t>& ids,
                      DroppedUnits& dropped) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    std::string spelling;
    if (options_.byte_level) {
      for (const char c : piece) AppendByteLevelChar(static_cast<uint8_t>(c), spelling);
    }
    const auto whole = vocab_.find(options_.byte_level ? std::string_view(spelling) : piece);
    if (whole != vocab_.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  std::vector<int32_t> initial;
  initial.reserve(piece.size());
  InitialSymbols(piece, piece_offset, initial, dropped);
  if (initial.size() <= 1) {
    ids.insert(ids.end(), initial.begin(), initial.end());
    return;
  }
  // symbols [n]: the initial ids, linked; a merged-away symbol has id -1.
  struct Symbol {
    int32_t id, prev, next;
  };
  const int32_t n = static_cast<int32_t>(initial.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) symbols[i] = {initial[i], i - 1, i + 1 < n ? i + 1 : -1};
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
