// The loss of a model on a stream of tokens, every token after the first scored exactly once:
// windows of `window` tokens at a stride of `stride` (= window: non-overlapping windows; smaller:
// a sliding window whose later windows score only the targets the earlier ones did not, each with
// up to window - stride tokens of context before it, as Hugging Face's perplexity guide computes
// it). Each window is one prefill of the KV-cache decoder.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "models/llama/llama_decoder.h"

namespace kelvin::models {

struct ScoreResult {
  double loss_sum = 0;  // sum over the scored targets of -log p(target)
  int64_t targets = 0;  // tokens scored (all but the first)
  int64_t windows = 0;
  double loss() const { return targets > 0 ? loss_sum / static_cast<double>(targets) : 0; }
};

// `tokens` (at least 2, ids inside the model's vocabulary), 1 <= stride <= window <= the decoder's
// max_tokens; errors name the value.
absl::StatusOr<ScoreResult> ScoreTokens(LlamaDecoder& decoder, std::span<const int32_t> tokens,
                                        int64_t window, int64_t stride);

}  // namespace kelvin::models
