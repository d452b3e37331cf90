// CorpusSampler: GPT-style rows from a TokenCorpus, shuffled per epoch, as deterministic
// micro-batches (epoch e visits all R rows in RowSampler's seeded Fisher-Yates order); and where a
// corpus's held-out part begins.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "data/corpus/token_corpus.h"
#include "data/sampling/row_sampler.h"

namespace kelvin::data {

// Where the held-out part of `corpus` begins when `eval_fraction` of its tokens are held out: the
// last ceil(eval_fraction N) tokens, their start moved forward to the next document boundary when
// that keeps at least half of them (so that no document is in both parts), else left inside the
// document, or with `whole_documents` (rows of whole samples, which a cut would split into a
// prompt and an answer) moved back to the document's start.
int64_t HeldOutStart(const TokenCorpus& corpus, double eval_fraction, bool whole_documents = false);

// The documents' tokens, concatenated in file order, are cut into rows of T + 1 tokens at stride T:
// row r holds stream tokens [s + r T, s + r T + T] of the sampled stretch [s, e) of the stream
// (consecutive rows share one token, so every token but the last is an input once).
class CorpusSampler : public RowSampler {
 public:
  static absl::StatusOr<std::unique_ptr<CorpusSampler>> Create(
      std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options);

  // With the corpus's loss mask, a label whose target is not a training target is ignored.
  absl::Status ReadRow(int64_t row, Batch& batch, int64_t b) const override;

 private:
  CorpusSampler(std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options);

  std::shared_ptr<const TokenCorpus> corpus_;
};

}  // namespace kelvin::data
