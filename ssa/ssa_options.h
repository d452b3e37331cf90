// The flags of Selective Self-Attention (docs/ssa.md "Variants") as the SSA code sees them, and
// their rules, stated here once: the job validation and the model's config.json check both call
// SsaOptionsProblems. The job config's model.ssa section maps onto SsaOptions field to field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kelvin::ssa {

// A closed interval every active temperature is clamped to (the falsification ablation).
struct TemperatureClamp {
  double lo = 0.9;
  double hi = 1.1;

  bool operator==(const TemperatureClamp&) const = default;
};

struct SsaOptions {
  bool query_temperature = true;  // tau^q on/off (off: tau^q = 1)
  bool value_temperature = true;  // tau^v on/off (off: tau^v = 1)
  bool token_aware = true;        // the tanh(z) terms of tau^q and tau^v
  bool position_aware = true;     // the sigma(alpha) ln n term of tau^q
  // true: z reads the pre-RoPE query u / the value v itself; false: z reads a separate per-head
  // projection (W_tmp x), which the caller computes and passes as the temperature source.
  bool weight_sharing = true;
  double alpha_init = -8.0;  // initial alpha of every head (sigma(-8) = 3.35e-4)
  // When set, each active temperature is clamped to [lo, hi] after it is computed.
  std::optional<TemperatureClamp> temperature_clamp;
  double temperature_lr_scale = 1.0;  // learning-rate multiplier of a^q, a^v, alpha (0 freezes)
};

// Both temperatures off: the SSA operator is plain causal GQA attention with RoPE (vanilla Llama).
// Not a valid job configuration (ValidateSsaOptions refuses it); the model uses it when SSA is off.
inline SsaOptions VanillaAttentionOptions() {
  SsaOptions options;
  options.query_temperature = false;
  options.value_temperature = false;
  return options;
}

// Every rule `options` breaks, one line each as "<where>.<field>=<value>: <rule>; <what to do>"
// (where e.g. "model.ssa"): alpha_init not finite; a clamp that is not finite 0 < lo < hi;
// temperature_lr_scale negative or not finite; flags that keep every temperature at exactly 1
// (vanilla attention at the cost of SSA). Empty when the options are valid.
std::vector<std::string> SsaOptionsProblems(const SsaOptions& options, const std::string& where);

// OK, or InvalidArgument with SsaOptionsProblems' lines (joined by "; ").
absl::Status ValidateSsaOptions(const SsaOptions& options, const std::string& where = "ssa");

}  // namespace kelvin::ssa
