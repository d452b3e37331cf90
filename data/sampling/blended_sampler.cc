// BlendedSampler: Megatron-style weighted blend of corpus samplers (see blended_sampler.h).
#include "data/sampling/blended_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/check.h"

namespace kelvin::data {

absl::StatusOr<std::unique_ptr<BlendedSampler>> BlendedSampler::Create(
    std::vector<std::unique_ptr<RowSampler>> corpora, std::vector<double> weights) {
  if (corpora.empty() || corpora.size() != weights.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a blend needs one weight per corpus and at least one corpus (%d corpora, %d weights)",
        corpora.size(), weights.size()));
  }
  for (size_t j = 0; j < corpora.size(); ++j) {
    if (!(weights[j] > 0) || !std::isfinite(weights[j])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "blend corpus %d has weight %g: weights must be positive", j, weights[j]));
    }
    KELVIN_CHECK(corpora[j]->micro_batch_size() == corpora[0]->micro_batch_size() &&
                 corpora[j]->sequence_length() == corpora[0]->sequence_length())
        << "the corpora of a blend share the micro-batch shape";
  }
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double& w : weights) w /= total;
  return std::unique_ptr<BlendedSampler>(
      new BlendedSampler(std::move(corpora), std::move(weights)));
}

BlendedSampler::BlendedSampler(std::vector<std::unique_ptr<RowSampler>> corpora,
                               std::vector<double> weights)
    : corpora_(std::move(corpora)),
      weights_(std::move(weights)),
      counts_at_block_{std::vector<int64_t>(corpora_.size(), 0)},
      block_(kBlock) {}

void BlendedSampler::ComputeBlock(int64_t block) {
  // The counts at the block's start, extending the table block by block.
  while (static_cast<int64_t>(counts_at_block_.size()) <= block) {
    const int64_t previous = static_cast<int64_t>(counts_at_block_.size()) - 1;
    ComputeBlock(previous);
    std::vector<int64_t> counts = counts_at_block_[previous];
    for (const Assignment& a : block_) ++counts[a.corpus];
    counts_at_block_.push_back(std::move(counts));
  }
  std::vector<int64_t> counts = counts_at_block_[block];
  for (int64_t i = 0; i < kBlock; ++i) {
    const int64_t g = block * kBlock + i;
    int best = 0;
    double best_lag = -1e300;
    for (size_t j = 0; j < weights_.size(); ++j) {
      // Megatron-LM's build_blending_indices: w_j max(g, 1) - n_j.
      const double lag = weights_[j] * static_cast<double>(std::max<int64_t>(g, 1)) -
                         static_cast<double>(counts[j]);
      if (lag > best_lag) {
        best_lag = lag;
        best = static_cast<int>(j);
      }
    }
    block_[i] = {best, counts[best]++};
  }
  cached_block_ = block;
}

BlendedSampler::Assignment BlendedSampler::AssignmentOf(int64_t global_sample) {
  KELVIN_CHECK_GE(global_sample, 0);
  const int64_t block = global_sample / kBlock;
  if (block != cached_block_) ComputeBlock(block);
  return block_[global_sample % kBlock];
}

absl::StatusOr<Batch> BlendedSampler::BatchAt(const BatchCoordinates& where) {
  const int64_t rows = micro_batch_size();
  const int64_t first = FirstGlobalSample(where, rows);
  Batch batch = AllocateBatch(rows, sequence_length());
  for (int64_t b = 0; b < rows; ++b) {
    const Assignment a = AssignmentOf(first + b);
    RowSampler& corpus = *corpora_[a.corpus];
    KELVIN_RETURN_IF_ERROR(corpus.ReadRow(corpus.RowOfSample(a.sample), batch, b));
  }
  return batch;
}

std::optional<int64_t> BlendedSampler::FixedRowCount() const {
  int64_t rows = 0;
  for (const std::unique_ptr<RowSampler>& corpus : corpora_) rows += corpus->num_rows();
  return rows;
}

absl::StatusOr<Batch> BlendedSampler::FixedRowsAt(int64_t first) {
  const int64_t total = *FixedRowCount();
  KELVIN_CHECK(first >= 0 && first < total) << first << " of " << total;
  Batch batch = AllocateBatch(micro_batch_size(), sequence_length());
  for (int64_t b = 0; b < batch.rows(); ++b) {
    int64_t row = first + b < total ? first + b : first;  // then: which corpus holds it
    size_t j = 0;
    while (row >= corpora_[j]->num_rows()) row -= corpora_[j++]->num_rows();
    KELVIN_RETURN_IF_ERROR(corpora_[j]->ReadRow(row, batch, b));
  }
  IgnoreRowsFrom(batch, total - first);
  return batch;
}

}  // namespace kelvin::data
