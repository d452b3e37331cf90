// Windows over the stream; per window the model's forward over its inputs and the LM loss
// (parallel::CrossEntropyLosses) of the scored inputs' rows; the per-token losses, on the host,
// summed in double in token order.
#include "inference/sequence_scorer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "parallel/loss/lm_loss.h"

namespace kelvin::inference {

absl::StatusOr<ScoreResult> ScoreTokens(models::LlamaModel& model, std::span<const int32_t> tokens,
                                        int64_t window, int64_t stride,
                                        std::span<const uint8_t> is_target) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", n, " tokens: scoring needs at least 2"));
  }
  if (!is_target.empty() && static_cast<int64_t>(is_target.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("the loss mask has ", is_target.size(),
                                                   " values for ", n, " tokens: one per token"));
  }
  const int64_t positions = model.config().PositionLimit();
  if (window < 1 || window > positions) {
    return absl::InvalidArgumentError(absl::StrCat("--seq-length ", window, ": must be in [1, ",
                                                   positions, "] (the model's positions)"));
  }
  if (stride < 1 || stride > window) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stride ", stride, ": must be in [1, --seq-length ", window, "]"));
  }
  const int64_t vocab = model.config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {  // every id, before the first window
    if (tokens[i] >= 0 && tokens[i] < vocab) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "token ", i, " is ", tokens[i], ", outside the model's vocabulary [0, ", vocab, ")"));
  }
  const Context& ctx = model.context();
  ScoreResult result;
  result.loss_sum_at.assign(static_cast<size_t>(window), 0.0);
  result.targets_at.assign(static_cast<size_t>(window), 0);
  int64_t scored_end = 0;  // inputs [0, scored_end) have had their targets scored
  for (int64_t begin = 0; scored_end < n - 1; begin += stride) {
    const int64_t end = std::min(begin + window, n - 1);  // inputs [begin, end)
    const int64_t first = std::max(scored_end, begin);    // inputs [first, end) are scored
    const int64_t length = end - begin, scored = end - first;
    Tensor ids = Tensor::Empty({1, length}, DType::kI32);           // [1, T] the window's inputs
    Tensor position_ids = Tensor::Empty({1, length}, DType::kI32);  // [1, T] 0 .. T - 1
    for (int64_t p = 0; p < length; ++p) {
      ids.data<int32_t>()[p] = tokens[begin + p];
      position_ids.data<int32_t>()[p] = static_cast<int32_t>(p);
    }
    // [T, V/TP] this rank's vocabulary slice, the LM head run on the scored inputs' rows
    // [R, V/TP] only (a sliding window's earlier rows were scored by an earlier window).
    const Tensor& logits = model.Forward(ctx, ids, position_ids, first - begin);
    const Tensor scored_logits = logits.Slice(first - begin, length);
    Tensor targets = Tensor::Empty({scored}, DType::kI32);  // [R]: tokens first + 1 .. end
    for (int64_t position = first; position < end; ++position) {
      targets.data<int32_t>()[position - first] = tokens[position + 1];
    }
    const Tensor losses =  // [R] on the host, f32 (f64 for an f64 model)
        parallel::CrossEntropyLosses(ctx, model.tp(), scored_logits, targets,
                                     model.layout().vocab_begin);
    for (int64_t i = 0; i < scored; ++i) {
      if (!is_target.empty() && is_target[first + i + 1] == 0) continue;  // not a target
      const double token_loss = losses.dtype() == DType::kF64
                                    ? losses.data<double>()[i]
                                    : static_cast<double>(losses.data<float>()[i]);
      const size_t position = static_cast<size_t>(first + i - begin);
      result.loss_sum += token_loss;
      ++result.targets;
      result.loss_sum_at[position] += token_loss;
      ++result.targets_at[position];
    }
    result.predicted += scored;
    scored_end = end;
    ++result.windows;
  }
  return result;
}

}  // namespace kelvin::inference
