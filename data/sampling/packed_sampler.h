// PackedSampler: rows of whole documents, for fine-tuning on samples (SFT: one document per
// prompt + answer). Unlike CorpusSampler's stream rows, a document is never split across rows: the
// documents of the sampled stretch are packed into rows of T tokens by best-fit decreasing, the
// rest of a row padding. Epoch e visits every row once in RowSampler's seeded order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "data/corpus/token_corpus.h"
#include "data/sampling/row_sampler.h"

namespace kelvin::data {

// Best-fit decreasing: longest first, each into the fullest row it fits (a function of the corpus
// and T alone, so every rank and every resume packs the same rows), each row's documents in stream
// order. A document shorter than 2 tokens has no label and is left out.
class PackedSampler : public RowSampler {
 public:
  static absl::StatusOr<std::unique_ptr<PackedSampler>> Create(
      std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options);

  int64_t num_documents() const { return static_cast<int64_t>(pieces_.size()); }  // packed ones
  // A document longer than T keeps its first T tokens, the last of them labelled with the
  // document's next token; truncated_without_targets counts those whose kept part has no training
  // target left (an answer cut away).
  int64_t truncated_documents() const { return truncated_documents_; }
  int64_t truncated_without_targets() const { return truncated_without_targets_; }
  int64_t packed_tokens() const { return packed_tokens_; }  // document tokens over all rows

  // Labels never cross documents (a whole document's last token has none); with the corpus's loss
  // mask only training targets carry labels. Padding is token 0 without loss. Positions restart at
  // each document (and at the padding) when documents mask, so attention stays inside each; else
  // they run 0..T-1 over the row.
  absl::Status ReadRow(int64_t row, Batch& batch, int64_t b) const override;

 private:
  // Stream tokens [begin, end) of `document` (its first T tokens at most); the labels read the
  // tokens up to label_end: end, or end + 1 when the document goes on past `end`.
  struct Piece {
    int64_t document = 0, begin = 0, end = 0, label_end = 0;
  };
  PackedSampler(std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options,
                std::vector<Piece> pieces, std::vector<int64_t> row_starts);
  // Counts the truncated pieces, and those of them whose labels predict no training target.
  absl::Status CountTruncated();

  std::shared_ptr<const TokenCorpus> corpus_;
  std::vector<Piece> pieces_;  // [P], row by row
  std::vector<int64_t>
      row_starts_;  // [R + 1]: row r holds pieces_[row_starts_[r], row_starts_[r + 1])
  int64_t truncated_documents_ = 0, truncated_without_targets_ = 0;
  int64_t packed_tokens_ = 0;
};

}  // namespace kelvin::data
