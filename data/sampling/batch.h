// Batch: what one micro-batch of training data is (token ids, labels, position ids and the
// documents in each row), where a micro-batch sits in the global batch of a step, and the
// BatchSource interface the trainer pulls micro-batches from. B rows, T tokens per row.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace kelvin::data {

// Where a micro-batch sits in training. Each step's global batch is micro_batches x dp_size
// micro-batches of B rows; global sample g = ((step * micro_batches + micro_batch) * dp_size +
// dp_rank) * B + b (Megatron's order), so resuming at a step gives the same batches, and a step's
// global batch is the same set of samples for any split of it into ranks and micro-batches.
struct BatchCoordinates {
  int64_t step = 0;
  int64_t micro_batch = 0;    // in [0, micro_batches)
  int64_t micro_batches = 1;  // per step and rank (gradient accumulation)
  int64_t dp_rank = 0;        // in [0, dp_size)
  int64_t dp_size = 1;
};

// The global sample index of row 0 of the micro-batch at `where`, B = micro_batch_size.
int64_t FirstGlobalSample(const BatchCoordinates& where, int64_t micro_batch_size);

// Input positions [begin, end) of a row that hold tokens of one document (kPaddingDocument: the
// padding that ends a row of packed documents).
inline constexpr int64_t kPaddingDocument = -1;
struct DocumentSpan {
  int64_t document = 0;
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const DocumentSpan&) const = default;
};

struct Batch {
  Tensor tokens;     // [B, T] i32
  Tensor labels;     // [B, T] i32: the next token, or ops::kIgnoreIndex where there is no loss
  Tensor positions;  // [B, T] i32: 0..T-1, or restarting at each document when documents mask
  std::vector<std::vector<DocumentSpan>> documents;  // [B]: spans covering [0, T) in order
  std::vector<int64_t> sources;  // [B]: the corpus row, or task sample index, of each row

  int64_t rows() const { return tokens.dim(0); }
  int64_t sequence_length() const { return tokens.dim(1); }
};

// Host tensors of [B, T] (contents unset) and B empty span lists and sources.
Batch AllocateBatch(int64_t rows, int64_t sequence_length);

// Row b from T + 1 consecutive tokens: tokens = row[0:T], labels = row[1:T+1], positions 0..T-1;
// row_tokens [T + 1].
void FillRow(Batch& batch, int64_t b, std::span<const int32_t> row_tokens);

// Micro-batches for the trainer, deterministic in their coordinates.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t micro_batch_size() const = 0;  // B
  virtual int64_t sequence_length() const = 0;   // T
  virtual absl::StatusOr<Batch> BatchAt(const BatchCoordinates& where) = 0;

  // Scoring every row of a finite source (held-out data): its rows in a fixed order, or nullopt
  // for a source without end (a task that makes samples).
  virtual std::optional<int64_t> FixedRowCount() const { return std::nullopt; }
  // Rows [first, first + B) of that order, first < FixedRowCount(); rows past the last repeat the
  // first with every label ignored, so that they add nothing to a loss.
  virtual absl::StatusOr<Batch> FixedRowsAt(int64_t first);
};

// Marks rows [from, B) of `batch` as padding: every label ignored.
void IgnoreRowsFrom(Batch& batch, int64_t from);

}  // namespace kelvin::data
