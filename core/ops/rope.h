// Rotary position embedding (RoPE) in Llama's Hugging Face "rotate_half" layout: element i of a
// head pairs with element i + d/2. N tokens, H heads, d head dim (even). Also the inverse
// frequencies, with Llama 3's frequency scaling. CPU: f32, f64. CUDA: f32, bf16 (angle and
// products in f32, cos and sin rounded to bf16 as Hugging Face's cos.to(x.dtype) does).
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// The rope fields of a Hugging Face Llama config.json.
struct RopeConfig {
  double theta = 500000.0;               // rope_theta
  bool llama3_scaling = false;           // rope_scaling.rope_type == "llama3"
  double factor = 8.0;                   // rope_scaling.factor
  double low_freq_factor = 1.0;          // rope_scaling.low_freq_factor
  double high_freq_factor = 4.0;         // rope_scaling.high_freq_factor
  int64_t original_max_position = 8192;  // rope_scaling.original_max_position_embeddings
};

// inv_freq [d/2] host tensor of `dtype` (f32 normally, f64 for f64 tests): 1 / theta^(2i/d) and,
// with llama3_scaling, transformers' _compute_llama3_parameters smoothing (long wavelengths divided
// by factor, short ones kept, those between interpolated). f32 mirrors transformers' float32 torch
// operations one by one (same order, same roundings); f64 is the same formulas in double.
Tensor RopeInverseFrequencies(const RopeConfig& config, int64_t head_dim, DType dtype);

// x [N, H, d], positions [N] i32 (position ids; they may restart inside a packed sequence),
// inv_freq [d/2] (AccumDType of x, on ctx's device) -> y [N, H, d] (dtype of x; y may be x).
// angle = position * inv_freq[i] in AccumDType, cos and sin rounded to x's dtype, then
// y[i] = x[i] cos - x[i + d/2] sin and y[i + d/2] = x[i + d/2] cos + x[i] sin.
void RopeForward(const Context& ctx, const Tensor& x, const Tensor& positions,
                 const Tensor& inv_freq, Tensor& y);

// dy [N, H, d] -> dx [N, H, d] (written; dx may be dy): dx = R(-angle) dy, the transpose of the
// forward rotation.
void RopeBackward(const Context& ctx, const Tensor& dy, const Tensor& positions,
                  const Tensor& inv_freq, Tensor& dx);

// Backends behind the dispatchers above (arguments already checked). They rotate by +angle
// (kForward) or -angle (kBackward).
enum class RopeDirection { kForward, kBackward };
namespace cpu {
void Rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeDirection direction,
          Tensor& y);
}  // namespace cpu
namespace cuda {
void Rope(const Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          RopeDirection direction, Tensor& y);
}  // namespace cuda

}  // namespace kelvin::ops
