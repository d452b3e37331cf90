// The SSA temperatures (docs/ssa.md) on the CPU, f32 and f64: the query
// temperature tau^q [N, H] and the value temperature tau^v [N, G], their backward, and their
// statistics. N tokens, H query heads, G key/value heads, d head dim.
#pragma once

#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "ssa/ssa_options.h"

namespace kelvin::ssa {

//   z     = a . GeLU(source)        (exact erf GeLU; source = the head's d-vector of the token)
//   tau^q = tanh(z) + 1 + sigma(alpha_h) ln(p_t + 1),    tau^v = tanh(z) + 1
// Flags (SsaOptions): a temperature that is off is exactly 1 and gets no gradient; token_aware off
// drops tanh(z) (and a, source get no gradient); position_aware off drops the sigma(alpha) term;
// the optional clamp applies to each active temperature after it is computed.

// Forward. source [N, H, d] (the pre-RoPE query u with weight sharing, else the output of the
// separate temperature projection), readout a^q [H, d], alpha [H] (both the dtype of source),
// positions [N] i32 -> tau [N, H] and tanh_z [N, H] (AccumDType of source; tanh(z), saved for
// backward; zeros when the tanh term is off).
void QueryTemperatureForward(const Context& ctx, const SsaOptions& options, const Tensor& source,
                             const Tensor& readout, const Tensor& alpha, const Tensor& positions,
                             Tensor& tau, Tensor& tanh_z);

// Backward of the above from dtau [N, H] (AccumDType) and the forward's tanh_z:
//   dsource [N, H, d] (dtype of source) += dz * a (*) GeLU'(source),  dz = dtau' (1 - tanh(z)^2)
//   dreadout [H, d] (AccumDType) += sum_t dz GeLU(source)
//   dalpha [H] (AccumDType) += sum_t dtau' sigma(alpha)(1 - sigma(alpha)) ln n_t
// where dtau' is dtau masked by the clamp (choice, as torch.clamp: zero where the unclamped
// temperature lies outside [lo, hi], passed through on the bounds). Every output accumulates: with
// weight sharing the source is u, whose gradient from the attention path is already there;
// without, zero dsource first.
void QueryTemperatureBackward(const Context& ctx, const SsaOptions& options, const Tensor& dtau,
                              const Tensor& source, const Tensor& readout, const Tensor& alpha,
                              const Tensor& positions, const Tensor& tanh_z, Tensor& dsource,
                              Tensor& dreadout, Tensor& dalpha);

// Forward of the value temperature: source [N, G, d] (v with weight sharing), readout a^v [G, d]
// -> tau [N, G], tanh_z [N, G] (AccumDType).
void ValueTemperatureForward(const Context& ctx, const SsaOptions& options, const Tensor& source,
                             const Tensor& readout, Tensor& tau, Tensor& tanh_z);

// Backward of the value temperature: dtau [N, G] -> dsource [N, G, d] +=, dreadout [G, d] +=
// (same formulas and accumulation as the query temperature, without the alpha term).
void ValueTemperatureBackward(const Context& ctx, const SsaOptions& options, const Tensor& dtau,
                              const Tensor& source, const Tensor& readout, const Tensor& tanh_z,
                              Tensor& dsource, Tensor& dreadout);

// Summary of one temperature tensor over all its tokens and heads (population std).
struct TemperatureSummary {
  int64_t count = 0;  // values summarised; 0 leaves the others at 0
  double mean = 0, std = 0, min = 0, max = 0;
};

// What a layer's temperatures look like (docs/ssa.md "Statistics"): the values of the paper's open
// question, to log per layer and step.
struct TemperatureStatistics {
  TemperatureSummary query;         // over tau^q [N, H]
  TemperatureSummary value;         // over tau^v [N, G]
  std::vector<double> sigma_alpha;  // [H]: sigma(alpha_h), the position slope of each head
};

// tau_q [N, H], tau_v [N, G], alpha [H] on ctx's device (any float dtype on the host, f32 on
// CUDA, where the values are reduced on the device and only per-block partials and alpha come
// back); an undefined tensor (a temperature that is off) leaves its summary empty (count 0) or
// sigma_alpha empty.
TemperatureStatistics ComputeTemperatureStatistics(const Context& ctx, const Tensor& tau_q,
                                                   const Tensor& tau_v, const Tensor& alpha);

// The summary of the union of the values `parts` summarise (the heads or tokens of several
// ranks): counts add, the mean and std are those of all the values, min and max the extremes.
TemperatureSummary MergeTemperatureSummaries(const std::vector<TemperatureSummary>& parts);

namespace cuda {
// The summary of tau [any shape] f32 on ctx's CUDA device: count, mean, std (two passes, as the
// host's), min and max.
TemperatureSummary SummarizeTemperatures(const Context& ctx, const Tensor& tau);
}  // namespace cuda

}  // namespace kelvin::ssa
