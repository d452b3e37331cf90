// Windows over the stream; per window the decoder's logits rows, log-softmax in double.
#include "models/generation/sequence_scorer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/copy.h"

namespace kelvin::models {
namespace {

// -log softmax(row)[target] for a host f32 or f64 row of `vocab` logits.
double NegativeLogProbability(const Tensor& logits, int64_t row, int64_t vocab, int32_t target) {
  const auto at = [&](int64_t i) {
    return logits.dtype() == DType::kF64
               ? logits.data<double>()[row * vocab + i]
               : static_cast<double>(logits.data<float>()[row * vocab + i]);
  };
  double top = at(0);
  for (int64_t i = 1; i < vocab; ++i) top = std::max(top, at(i));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(at(i) - top);
  return top + std::log(sum) - at(target);
}

}  // namespace

absl::StatusOr<ScoreResult> ScoreTokens(LlamaDecoder& decoder, std::span<const int32_t> tokens,
                                        int64_t window, int64_t stride) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", n, " tokens: scoring needs at least 2"));
  }
  if (window < 1 || window > decoder.max_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("--seq-length ", window, ": must be in [1, ",
                                                   decoder.max_tokens(),
                                                   "] (the model's max_position_embeddings)"));
  }
  if (stride < 1 || stride > window) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stride ", stride, ": must be in [1, --seq-length ", window, "]"));
  }
  ScoreResult result;
  int64_t scored_end = 0;  // inputs [0, scored_end) have had their targets scored
  for (int64_t begin = 0; scored_end < n - 1; begin += stride) {
    const int64_t end = std::min(begin + window, n - 1);  // inputs [begin, end)
    decoder.Reset();
    KELVIN_ASSIGN_OR_RETURN(
        const Tensor logits,
        decoder.Append(std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end)));
    const Tensor host =
        logits.is_cpu() ? logits : CopyToDevice(decoder.context(), logits, Device::Cpu());
    const int64_t vocab = host.dim(1);
    for (int64_t position = std::max(scored_end, begin); position < end; ++position) {
      const int32_t target = tokens[position + 1];
      if (target < 0 || target >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("token ", position + 1, " is ", target,
                                                       ", outside the model's vocabulary [0, ",
                                                       vocab, ")"));
      }
      result.loss_sum += NegativeLogProbability(host, position - begin, vocab, target);
      ++result.targets;
    }
    scored_end = end;
    ++result.windows;
  }
  return result;
}

}  // namespace kelvin::models
