// Generation: prompts prefilled into the KV-cache decoder, then tokens sampled one at a time until
// an end-of-sequence id, a stop condition or the token budget, one prompt or a batch of them
// together.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "inference/token_sampler.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_decoder.h"

namespace kelvin::inference {

// The most new tokens one request may ask for: no model has more positions (kMaxPositions),
// and the budget plus a prompt stays far inside int64.
inline constexpr int64_t kMaxNewTokens = models::kMaxPositions;

struct GenerationRequest {
  std::vector<int32_t> prompt;    // at least one token
  int64_t max_new_tokens = 64;    // in [1, kMaxNewTokens]
  std::vector<int32_t> stop_ids;  // end-of-sequence ids (the model's eos): generated, then stop
  // Called with the tokens generated so far; true stops (e.g. a stop string in their text).
  std::function<bool(const std::vector<int32_t>&)> stop_after;
  SamplingOptions sampling;
  AllowedIds allowed;  // the ids sampling may draw (null: every id), e.g. those with text
};

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated, the stop id included
  std::vector<double> logprobs;  // [tokens.size()] under the model
  std::string finish_reason;     // "eos", "stop" or "length"
};

// Where a generation's time went, summed over calls: the prefill (the first decoder call, over
// every prompt, and its samples) and the decode steps after it (one token per running sequence).
struct GenerationTiming {
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prompt_tokens = 0, decoded_tokens = 0;
};

// Resets `decoder` and generates; the prompt plus max_new_tokens - 1 (the last new token is never
// read back) must fit in it (else an error naming both).
absl::StatusOr<GenerationResult> Generate(models::LlamaDecoder& decoder,
                                          const GenerationRequest& request);

// The same for up to decoder.sequences() requests at once (prompts of any lengths, each its own
// budget, sampler and stops): one decoder call per step for every unfinished request. Each result
// is the one Generate gives its request alone, up to the rounding of the batched projections.
// `timing` (when given) accumulates this call's.
absl::StatusOr<std::vector<GenerationResult>> GenerateBatch(
    models::LlamaDecoder& decoder, const std::vector<GenerationRequest>& requests,
    GenerationTiming* timing = nullptr);

}  // namespace kelvin::inference
