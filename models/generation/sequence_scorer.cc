// Windows over the stream; per window the decoder's logits of the targets' rows and the training
// loss's fused cross-entropy (ops::CrossEntropyForward) on the model's device; only the per-token
// losses come back to the host, summed in double.
#include "models/generation/sequence_scorer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/ops/cross_entropy.h"

namespace kelvin::models {

absl::StatusOr<ScoreResult> ScoreTokens(LlamaDecoder& decoder, std::span<const int32_t> tokens,
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
  if (window < 1 || window > decoder.max_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("--seq-length ", window, ": must be in [1, ",
                                                   decoder.max_tokens(),
                                                   "] (the decoder's length)"));
  }
  if (stride < 1 || stride > window) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stride ", stride, ": must be in [1, --seq-length ", window, "]"));
  }
  const Context& ctx = decoder.context();
  const int64_t vocab = decoder.model().config().vocab_size;
  ScoreResult result;
  result.loss_sum_at.assign(static_cast<size_t>(window), 0.0);
  result.targets_at.assign(static_cast<size_t>(window), 0);
  int64_t scored_end = 0;  // inputs [0, scored_end) have had their targets scored
  for (int64_t begin = 0; scored_end < n - 1; begin += stride) {
    const int64_t end = std::min(begin + window, n - 1);  // inputs [begin, end)
    const int64_t first = std::max(scored_end, begin);    // inputs [first, end) are scored
    const int64_t scored = end - first;
    decoder.Reset();
    KELVIN_ASSIGN_OR_RETURN(
        const Tensor logits,  // [R, V]: the scored inputs' rows
        decoder.Append(std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end), scored));
    Tensor targets = Tensor::Empty({scored}, DType::kI32);  // [R]: tokens first + 1 .. end
    for (int64_t position = first; position < end; ++position) {
      const int32_t target = tokens[position + 1];
      if (target < 0 || target >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("token ", position + 1, " is ", target,
                                                       ", outside the model's vocabulary [0, ",
                                                       vocab, ")"));
      }
      targets.data<int32_t>()[position - first] = target;
    }
    const DType accum = AccumDType(logits.dtype());
    Tensor loss = Tensor::Empty({scored}, accum, ctx.device());  // [R] -log p(target)
    Tensor lse = Tensor::Empty({scored}, accum, ctx.device());
    ops::CrossEntropyForward(ctx, logits, CopyToDevice(ctx, targets, ctx.device()), loss, lse);
    const Tensor host = loss.is_cpu() ? loss : CopyToDevice(ctx, loss, Device::Cpu());
    for (int64_t i = 0; i < scored; ++i) {
      if (!is_target.empty() && is_target[first + i + 1] == 0) continue;  // not a target
      const double token_loss = accum == DType::kF64 ? host.data<double>()[i]
                                                     : static_cast<double>(host.data<float>()[i]);
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

}  // namespace kelvin::models
