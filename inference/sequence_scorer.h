// The loss of a model on a stream of tokens, every token after the first scored exactly once:
// windows of `window` tokens at a stride of `stride` (= window: non-overlapping windows; smaller:
// a sliding window whose later windows score only the targets the earlier ones did not, each with
// up to window - stride tokens of context before it, as Hugging Face's perplexity guide computes
// it). Each window is one forward of the forward-only model and its targets' losses the LM loss of
// the held-out evaluation (parallel/loss/lm_loss.h). With a loss mask (fine-tuning data) only the
// tokens it marks as targets count, each still predicted from its whole window. The losses are
// also summed by position in the window (loss_by_position.h groups them).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "models/llama/llama_model.h"

namespace kelvin::inference {

struct ScoreResult {
  double loss_sum = 0;    // sum over the scored targets of -log p(target)
  int64_t targets = 0;    // tokens counted in the loss (all but the first, or the mask's targets)
  int64_t predicted = 0;  // tokens predicted (all but the first), targets or not
  int64_t windows = 0;
  // [window] by position p in its window of the input whose logits predict the target (its
  // position id; it has seen p + 1 tokens): the summed loss and the number of targets scored there.
  std::vector<double> loss_sum_at;
  std::vector<int64_t> targets_at;
  double loss() const { return targets > 0 ? loss_sum / static_cast<double>(targets) : 0; }
};

// `model`: a whole model on one pipeline rank (its tensor-parallel group's ranks all calling with
// the same arguments); `tokens` (at least 2, ids inside the model's vocabulary),
// 1 <= stride <= window <= the model's positions (LlamaConfig::PositionLimit); `is_target`
// [tokens.size()]: 1 where the token counts in the loss (the first token never does), 0 where it
// does not; empty: every token after the first counts. Errors name the value.
absl::StatusOr<ScoreResult> ScoreTokens(models::LlamaModel& model, std::span<const int32_t> tokens,
                                        int64_t window, int64_t stride,
                                        std::span<const uint8_t> is_target = {});

}  // namespace kelvin::inference
