// Rotary position embedding (RoPE) in Llama's Hugging Face "rotate_half" layout: element i of a
// head pairs with element i + d/2. N tokens, H heads, d head dim (even). Also the inverse
// frequencies and attention factor of every RoPE scaling transformers computes for Llama (default,
// linear, yarn, longrope, llama3, dynamic). CPU: f32, f64. CUDA: f32, bf16 (angle and products in
// f32, cos and sin rounded to bf16 as Hugging Face's cos.to(x.dtype) does).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// rope_type of a Hugging Face config.json. kDynamic is transformers' dynamic NTK scaling, whose
// frequencies depend on the call's length (RopeCallInverseFrequencies); its original length is
// max_position_embeddings (RopeConfig::original_max_position holds it).
enum class RopeType { kDefault, kLinear, kYarn, kLongrope, kLlama3, kDynamic };

// The rope fields of a Hugging Face Llama config.json (rope_parameters, or rope_theta and
// rope_scaling). Fields a scaling type does not use are ignored; optional ones stay unset when the
// config did not give them, so that an export writes back what it read.
struct RopeConfig {
  double theta = 500000.0;  // rope_theta
  RopeType type = RopeType::kDefault;
  // linear, yarn, llama3, longrope, dynamic: the context extension factor. yarn and longrope
  // without one in config.json: max_position_embeddings / original_max_position_embeddings, as
  // transformers.
  double factor = 8.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  // llama3, yarn, longrope: the pretraining context; dynamic: max_position_embeddings
  int64_t original_max_position = 8192;
  // yarn and longrope: multiplies cos and sin (so q.k by its square); unset: from factor (and
  // mscale, mscale_all_dim for yarn) as transformers derives it.
  std::optional<double> attention_factor;
  std::optional<double> beta_fast;       // yarn: unset or 0 means 32
  std::optional<double> beta_slow;       // yarn: unset or 0 means 1
  std::optional<double> mscale;          // yarn
  std::optional<double> mscale_all_dim;  // yarn
  std::optional<bool> truncate;          // yarn: round the correction range out; unset means true
  std::vector<double> short_factor;      // longrope [d/2]: for calls within the original length
  std::vector<double> long_factor;       // longrope [d/2]: for calls beyond it

  bool operator==(const RopeConfig&) const = default;
};

// "default", "linear", "yarn", "longrope", "llama3", "dynamic": the rope_type of config.json.
const char* RopeTypeName(RopeType type);

// Whether a forward call whose largest position id is `max_position` uses LongRoPE's long factors:
// as transformers, when max_position + 1 exceeds original_max_position (always false for the other
// types). The call is one forward of transformers' model: one micro-batch, or one decoder append.
bool RopeUsesLongFactors(const RopeConfig& config, int64_t max_position);
// Whether the frequencies depend on the forward call (longrope, dynamic): each call then takes
// RopeCallInverseFrequencies of its largest position id.
bool RopeDependsOnCall(const RopeConfig& config);
// Whether a call whose largest position id is `max_position` uses other frequencies than
// RopeInverseFrequencies' (LongRoPE's long factors, dynamic NTK's raised base): the type depends
// on the call and max_position + 1 exceeds original_max_position.
bool RopeScalesCall(const RopeConfig& config, int64_t max_position);

// inv_freq [d/2] host tensor of `dtype` (f32 normally, f64 for f64 tests), as transformers'
// ROPE_INIT_FUNCTIONS compute it: 1 / theta^(2i/d), divided by factor (linear), blended between
// that and its factor-th by YaRN's ramp over the correction range (yarn), divided by the short or
// long factors (longrope, `long_factors` picks), or Llama 3's smoothing (long wavelengths divided
// by factor, short ones kept, those between interpolated); dynamic: the unscaled ones (a call
// within the original length). f32 mirrors transformers' float32 torch operations one by one
// (same order, same roundings); f64 is the same formulas in double.
Tensor RopeInverseFrequencies(const RopeConfig& config, int64_t head_dim, DType dtype,
                              bool long_factors = false);
// The frequencies of one forward call whose largest position id is `max_position`, as
// transformers picks them per call: LongRoPE's long factors beyond the original length; dynamic
// NTK's base raised for the call's length L = max_position + 1 beyond the original length O,
// rope_theta * (factor L / O - (factor - 1))^(d / (d - 2)); the others' fixed ones.
Tensor RopeCallInverseFrequencies(const RopeConfig& config, int64_t head_dim, DType dtype,
                                  int64_t max_position);

// The factor transformers multiplies cos and sin by (its attention_scaling): yarn's and
// longrope's, given or derived from the factor; 1 for the other types.
double RopeAttentionFactor(const RopeConfig& config);

// x [N, H, d], positions [N] i32 (position ids; they may restart inside a packed sequence),
// inv_freq [d/2] (AccumDType of x, on ctx's device) -> y [N, H, d] (dtype of x; y may be x).
// angle = position * inv_freq[i] in AccumDType, cos and sin times attention_factor
// (RopeAttentionFactor) rounded to x's dtype, then y[i] = x[i] cos - x[i + d/2] sin and
// y[i + d/2] = x[i + d/2] cos + x[i] sin.
void RopeForward(const Context& ctx, const Tensor& x, const Tensor& positions,
                 const Tensor& inv_freq, Tensor& y, double attention_factor = 1.0);

// dy [N, H, d] -> dx [N, H, d] (written; dx may be dy): dx = R(-angle) dy with the same scaled cos
// and sin, the transpose of the forward map.
void RopeBackward(const Context& ctx, const Tensor& dy, const Tensor& positions,
                  const Tensor& inv_freq, Tensor& dx, double attention_factor = 1.0);

// Backends behind the dispatchers above (arguments already checked). They rotate by +angle
// (kForward) or -angle (kBackward).
enum class RopeDirection { kForward, kBackward };
namespace cpu {
void Rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeDirection direction,
          Tensor& y, double attention_factor = 1.0);
}  // namespace cpu
namespace cuda {
void Rope(const Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          RopeDirection direction, Tensor& y, double attention_factor);
}  // namespace cuda

}  // namespace kelvin::ops
