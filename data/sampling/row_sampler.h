// RowSampler: what the corpus samplers share. A corpus sampler cuts (part of) a TokenCorpus into R
// rows of T tokens, its own way (stream rows: CorpusSampler; whole documents: PackedSampler);
// epoch e visits all R rows in the Fisher-Yates order of mt19937_64(MixSeed(seed, e)), so global
// sample g is row order_{g / R}[g % R] and resuming at any sample gives the same rows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "data/corpus/token_corpus.h"
#include "data/sampling/batch.h"

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

// Validates the options every corpus sampler shares and resolves stream_end (-1: the corpus's
// end); the errors name the corpus and the value.
absl::StatusOr<SamplerOptions> ResolveSamplerOptions(const TokenCorpus& corpus,
                                                     const SamplerOptions& options);

// labels [n]: label i's target is stream token first_target + i; with the corpus's loss mask,
// labels whose target is not a training target become ops::kIgnoreIndex (no mask: unchanged).
absl::Status IgnoreNonTargets(const TokenCorpus& corpus, int64_t first_target,
                              std::span<int32_t> labels);

class RowSampler : public BatchSource {
 public:
  int64_t micro_batch_size() const override { return options_.micro_batch_size; }
  int64_t sequence_length() const override { return options_.sequence_length; }
  int64_t num_rows() const { return num_rows_; }  // R, rows per epoch

  // The row of global sample g (g / R is its epoch). Not thread-safe: the order of the latest
  // epoch asked for is cached (so is BatchAt).
  int64_t RowOfSample(int64_t global_sample);
  // The B rows of global samples FirstGlobalSample(where, B) + [0, B).
  absl::StatusOr<Batch> BatchAt(const BatchCoordinates& where) override;
  // Every row in corpus order: R rows; FixedRowsAt(first) reads rows first.. (see batch.h).
  std::optional<int64_t> FixedRowCount() const override { return num_rows_; }
  absl::StatusOr<Batch> FixedRowsAt(int64_t first) override;
  // Any rows, in the given order (e.g. a fixed evaluation set); rows [n] in [0, R).
  absl::StatusOr<Batch> ReadRows(std::span<const int64_t> rows) const;
  // Row `row` into batch row b: tokens, labels, positions, document spans and source.
  virtual absl::Status ReadRow(int64_t row, Batch& batch, int64_t b) const = 0;

 protected:
  // options: resolved (ResolveSamplerOptions); num_rows > 0.
  RowSampler(const SamplerOptions& options, int64_t num_rows);
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  int64_t num_rows_;
  int64_t order_epoch_ = -1;    // the epoch order_ belongs to
  std::vector<int64_t> order_;  // [R]
};

}  // namespace kelvin::data
