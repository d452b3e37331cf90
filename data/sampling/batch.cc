// Batch layout and the global sample order (see batch.h).
#include "data/sampling/batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/ops/cross_entropy.h"

namespace kelvin::data {

int64_t FirstGlobalSample(const BatchCoordinates& where, int64_t micro_batch_size) {
  KELVIN_CHECK(where.step >= 0 && where.micro_batch >= 0 &&
               where.micro_batch < where.micro_batches && where.dp_rank >= 0 &&
               where.dp_rank < where.dp_size && micro_batch_size > 0)
      << "step " << where.step << ", micro-batch " << where.micro_batch << " of "
      << where.micro_batches << ", DP rank " << where.dp_rank << " of " << where.dp_size << ", B "
      << micro_batch_size;
  return ((where.step * where.micro_batches + where.micro_batch) * where.dp_size + where.dp_rank) *
         micro_batch_size;
}

Batch AllocateBatch(int64_t rows, int64_t sequence_length) {
  KELVIN_CHECK(rows > 0 && sequence_length > 0) << rows << " x " << sequence_length;
  Batch batch;
  batch.tokens = Tensor::Empty({rows, sequence_length}, DType::kI32);
  batch.labels = Tensor::Empty({rows, sequence_length}, DType::kI32);
  batch.positions = Tensor::Empty({rows, sequence_length}, DType::kI32);
  batch.documents.resize(rows);
  batch.sources.resize(rows);
  return batch;
}

void FillRow(Batch& batch, int64_t b, std::span<const int32_t> row_tokens) {
  const int64_t t_len = batch.sequence_length();
  KELVIN_CHECK(b >= 0 && b < batch.rows()) << b;
  KELVIN_CHECK_EQ(static_cast<int64_t>(row_tokens.size()), t_len + 1);
  int32_t* tokens = batch.tokens.data<int32_t>() + b * t_len;        // [T]
  int32_t* labels = batch.labels.data<int32_t>() + b * t_len;        // [T]
  int32_t* positions = batch.positions.data<int32_t>() + b * t_len;  // [T]
  for (int64_t t = 0; t < t_len; ++t) {
    tokens[t] = row_tokens[t];
    labels[t] = row_tokens[t + 1];
    positions[t] = static_cast<int32_t>(t);
  }
}

absl::StatusOr<Batch> BatchSource::FixedRowsAt(int64_t first) {
  return absl::FailedPreconditionError(absl::StrCat(
      "this data source makes its samples without end: it has no fixed rows to score all of "
      "(asked for rows from ",
      first, ")"));
}

void IgnoreRowsFrom(Batch& batch, int64_t from) {
  const int64_t t_len = batch.sequence_length();
  int32_t* labels = batch.labels.data<int32_t>();  // [B, T]
  for (int64_t b = std::max<int64_t>(from, 0); b < batch.rows(); ++b) {
    std::fill(labels + b * t_len, labels + (b + 1) * t_len, ops::kIgnoreIndex);
  }
}

}  // namespace kelvin::data
