// RowSampler: the options, label masking and per-epoch row order the corpus samplers share (see
// row_sampler.h).
#include "data/sampling/row_sampler.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/ops/cross_entropy.h"
#include "data/sampling/random.h"

namespace kelvin::data {

absl::StatusOr<SamplerOptions> ResolveSamplerOptions(const TokenCorpus& corpus,
                                                     const SamplerOptions& options) {
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  if (options.sequence_length <= 0 || options.sequence_length >= kMaxInt32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sequence length %d must be in [1, 2^31 - 1)", options.sequence_length));
  }
  if (options.micro_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("micro-batch size %d must be positive", options.micro_batch_size));
  }
  if (options.vocab_size <= 0 || options.vocab_size > kMaxInt32 + 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocab size %d must be in [1, 2^31]", options.vocab_size));
  }
  SamplerOptions resolved = options;
  if (resolved.stream_end < 0) resolved.stream_end = corpus.num_tokens();
  if (resolved.stream_begin < 0 || resolved.stream_begin > resolved.stream_end ||
      resolved.stream_end > corpus.num_tokens()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token corpus '%s': tokens [%d, %d) are not a stretch of its %d tokens", corpus.path(),
        resolved.stream_begin, resolved.stream_end, corpus.num_tokens()));
  }
  return resolved;
}

absl::Status IgnoreNonTargets(const TokenCorpus& corpus, int64_t first_target,
                              std::span<int32_t> labels) {
  if (!corpus.has_loss_mask() || labels.empty()) return absl::OkStatus();
  std::vector<uint8_t> targets(labels.size());  // [n]
  KELVIN_RETURN_IF_ERROR(corpus.ReadLossMask(first_target, targets));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (targets[i] == 0) labels[i] = ops::kIgnoreIndex;
  }
  return absl::OkStatus();
}

RowSampler::RowSampler(const SamplerOptions& options, int64_t num_rows)
    : options_(options), num_rows_(num_rows) {
  KELVIN_CHECK_GT(num_rows, 0);
}

int64_t RowSampler::RowOfSample(int64_t global_sample) {
  KELVIN_CHECK_GE(global_sample, 0);
  const int64_t epoch = global_sample / num_rows_;
  if (epoch != order_epoch_) {
    order_ = SeededPermutation(num_rows_, MixSeed(options_.seed, static_cast<uint64_t>(epoch)));
    order_epoch_ = epoch;
  }
  return order_[global_sample % num_rows_];
}

absl::StatusOr<Batch> RowSampler::BatchAt(const BatchCoordinates& where) {
  const int64_t first = FirstGlobalSample(where, options_.micro_batch_size);
  std::vector<int64_t> rows(options_.micro_batch_size);  // [B]
  for (int64_t b = 0; b < options_.micro_batch_size; ++b) rows[b] = RowOfSample(first + b);
  return ReadRows(rows);
}

absl::StatusOr<Batch> RowSampler::FixedRowsAt(int64_t first) {
  KELVIN_CHECK(first >= 0 && first < num_rows_) << first << " of " << num_rows_;
  std::vector<int64_t> rows(options_.micro_batch_size);  // [B]
  for (int64_t b = 0; b < options_.micro_batch_size; ++b) {
    rows[b] = first + b < num_rows_ ? first + b : first;
  }
  KELVIN_ASSIGN_OR_RETURN(Batch batch, ReadRows(rows));
  IgnoreRowsFrom(batch, num_rows_ - first);
  return batch;
}

absl::StatusOr<Batch> RowSampler::ReadRows(std::span<const int64_t> rows) const {
  Batch batch = AllocateBatch(static_cast<int64_t>(rows.size()), options_.sequence_length);
  for (size_t b = 0; b < rows.size(); ++b) {
    KELVIN_RETURN_IF_ERROR(ReadRow(rows[b], batch, static_cast<int64_t>(b)));
  }
  return batch;
}

}  // namespace kelvin::data
