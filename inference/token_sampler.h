// The next token from a row of logits: greedy (temperature 0), or a draw at a temperature from the
// top-k and top-p (nucleus) tokens, with a SplitMix64 stream of its own so that a seed gives the
// same tokens on every machine and build; and the chosen token's log-probability under the model
// (log softmax of the raw logits, whatever the sampling settings). The ids drawn from may be
// limited to an allowed set (e.g. the ids a tokenizer can spell).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace kelvin::inference {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax, the lowest id on ties)
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // (0, 1]: the smallest set of likeliest tokens with this mass
  uint64_t seed = 0;
};

// [V]: 1 where the id may be sampled, 0 where it may not (greedy and top-k/top-p pass over it);
// null: every id. Log-probabilities stay the model's over every id.
using AllowedIds = std::shared_ptr<const std::vector<uint8_t>>;

// The settings' rules, e.g. "--top-p 1.5: must be in (0, 1]"; `flag` prefixes name the options.
absl::Status ValidateSamplingOptions(const SamplingOptions& options);

struct SampledToken {
  int32_t token = 0;
  double logprob = 0.0;
};

class TokenSampler {
 public:
  // `allowed`: the ids it may draw (null: every id); it must allow one.
  explicit TokenSampler(const SamplingOptions& options, AllowedIds allowed = nullptr);

  // logits [V] (a host f32 or f64 row) -> the next token (an allowed one; ids beyond the allowed
  // set's size are not allowed).
  SampledToken Next(const Tensor& logits);

 private:
  double Uniform();  // in [0, 1)

  SamplingOptions options_;
  AllowedIds allowed_;
  uint64_t state_;
};

}  // namespace kelvin::inference
