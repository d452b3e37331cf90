// CorpusSampler: GPT-style rows from a TokenCorpus, shuffled per epoch, as deterministic
// micro-batches. The documents' tokens, concatenated in file order, are cut into rows of T + 1
// tokens at stride T (row r holds stream tokens [s + r T, s + r T + T] of the sampled stretch
// [s, e) of the stream; consecutive rows share one token, so every token but the last is an input
// once). Epoch e visits all R rows in a Fisher-Yates
// order of mt19937_64(MixSeed(seed, e)); global sample g is row perm_{g / R}[g % R].
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/data/batch.h"
#include "core/data/token_corpus.h"
#include "core/status.h"

namespace kelvin::data {

struct SamplerOptions {
  int64_t sequence_length = 0;   // T
  int64_t micro_batch_size = 0;  // B
  int64_t vocab_size = 0;        // V: every token read must lie in [0, V)
  uint64_t seed = 0;
  // Positions restart at 0 at each document start inside a row, and the label of a document's
  // last token (the next document's first) is ignored: no loss across documents.
  bool document_masking = false;
  // The stretch of the stream sampled, [stream_begin, stream_end) (-1: to the end): the training
  // part or the held-out part (HeldOutStart).
  int64_t stream_begin = 0, stream_end = -1;
};

// Where the held-out part of `corpus` begins when `eval_fraction` of its tokens are held out: the
// last ceil(eval_fraction N) tokens, their start moved forward to the next document boundary when
// that keeps at least half of them (so that no document is in both parts), else left inside the
// document.
int64_t HeldOutStart(const TokenCorpus& corpus, double eval_fraction);

class CorpusSampler : public BatchSource {
 public:
  static absl::StatusOr<std::unique_ptr<CorpusSampler>> Create(
      std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options);

  int64_t micro_batch_size() const override { return options_.micro_batch_size; }
  int64_t sequence_length() const override { return options_.sequence_length; }
  int64_t num_rows() const { return num_rows_; }  // R, rows per epoch

  // The row of global sample g (g / R is its epoch). Not thread-safe: the order of the latest
  // epoch asked for is cached (so is BatchAt).
  int64_t RowOfSample(int64_t global_sample);
  // The B rows of global samples FirstGlobalSample(where, B) + [0, B).
  absl::StatusOr<Batch> BatchAt(const BatchCoordinates& where) override;
  // Any rows, in the given order (e.g. a fixed evaluation set); rows [n] in [0, R).
  absl::StatusOr<Batch> ReadRows(std::span<const int64_t> rows) const;
  // Row `row` into batch row b: tokens, labels, positions, document spans and source.
  absl::Status ReadRow(int64_t row, Batch& batch, int64_t b) const;

 private:
  CorpusSampler(std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options);

  std::shared_ptr<const TokenCorpus> corpus_;
  SamplerOptions options_;
  int64_t num_rows_;
  int64_t permutation_epoch_ = -1;    // the epoch permutation_ belongs to
  std::vector<int64_t> permutation_;  // [R]
};

}  // namespace kelvin::data
