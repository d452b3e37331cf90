// The next token from a row of logits: greedy (temperature 0), or a draw at a temperature from the
// top-k and top-p (nucleus) tokens, with a SplitMix64 stream of its own so that a seed gives the
// same tokens on every machine and build; and the chosen token's log-probability under the model
// (log softmax of the raw logits, whatever the sampling settings).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"

namespace kelvin::models {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax, the lowest id on ties)
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // (0, 1]: the smallest set of likeliest tokens with this mass
  uint64_t seed = 0;
};

// The settings' rules, e.g. "--top-p 1.5: must be in (0, 1]"; `flag` prefixes name the options.
absl::Status ValidateSamplingOptions(const SamplingOptions& options);

struct SampledToken {
  int32_t token = 0;
  double logprob = 0.0;
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& options) : options_(options), state_(options.seed) {}

  // logits [V] (a host f32 or f64 row) -> the next token.
  SampledToken Next(const Tensor& logits);

 private:
  double Uniform();  // in [0, 1)

  SamplingOptions options_;
  uint64_t state_;
};

}  // namespace kelvin::models
