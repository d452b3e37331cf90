// RoPE: the inverse frequencies (plain and Llama 3 scaled), argument checks and dispatch to the CPU
// or CUDA kernel.
#include "core/ops/rope.h"

#include <cmath>
#include <numbers>

#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

// transformers' _compute_llama3_parameters for one frequency, each torch float32 operation
// mirrored in T with its rounding (a Python scalar meets a float32 tensor as a float32):
//   wavelen = 2 * math.pi / inv_freq           # Tensor.__rtruediv__: reciprocal(), then * 2 pi
//   inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
//   smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
//   smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
//   result = where(~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen), smoothed,
//                  inv_freq_llama)
// The product-then-sum steps must stay unfused (as torch runs them): the build targets baseline
// x86-64, which has no FMA instruction to contract them into (the test pins the bits).
template <typename T>
T Llama3Scaled(T inv_freq, const RopeConfig& c) {
  const T old_context = static_cast<T>(c.original_max_position);
  const T factor = static_cast<T>(c.factor);
  const T low_freq_wavelen =
      static_cast<T>(static_cast<double>(c.original_max_position) / c.low_freq_factor);
  const T high_freq_wavelen =
      static_cast<T>(static_cast<double>(c.original_max_position) / c.high_freq_factor);
  const T wavelen = (T(1) / inv_freq) * static_cast<T>(2 * std::numbers::pi);
  const T inv_freq_llama = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
  const T smooth = ((T(1) / wavelen) * old_context - static_cast<T>(c.low_freq_factor)) /
                   static_cast<T>(c.high_freq_factor - c.low_freq_factor);
  const T smoothed = (T(1) - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama;
  const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
  return medium ? smoothed : inv_freq_llama;
}

// inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), with
// base ** tensor computed as pow(float(base), exponent) per element.
template <typename T>
void InverseFrequencies(const RopeConfig& config, int64_t head_dim, T* inv_freq) {
  const T base = static_cast<T>(config.theta);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const T exponent = static_cast<T>(2 * i) / static_cast<T>(head_dim);
    const T value = T(1) / std::pow(base, exponent);
    inv_freq[i] = config.llama3_scaling ? Llama3Scaled(value, config) : value;
  }
}

void CheckArguments(const Context& ctx, const Tensor& x, const Tensor& positions,
                    const Tensor& inv_freq, const Tensor& y, std::string_view op) {
  KELVIN_CHECK_EQ(x.ndim(), 3) << op << ": input must be [N, H, d], got " << x.ToString();
  const int64_t n = x.dim(0), d = x.dim(2);
  KELVIN_CHECK(d > 0 && d % 2 == 0)
      << op << ": head dim d must be even and positive, got " << x.ToString();
  CheckShape(positions, {n}, "rope.positions");
  CheckDType(positions, DType::kI32, "rope.positions");
  CheckShape(inv_freq, {d / 2}, "rope.inv_freq");
  CheckDType(inv_freq, AccumDType(x.dtype()), "rope.inv_freq");
  CheckShape(y, x.shape(), "rope.output");
  CheckDType(y, x.dtype(), "rope.output");
  CheckDevice(ctx, {&x, &positions, &inv_freq, &y}, op);
}

void Dispatch([[maybe_unused]] const Context& ctx, const Tensor& x, const Tensor& positions,
              const Tensor& inv_freq, RopeDirection direction, Tensor& y) {
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Rope(ctx, x, positions, inv_freq, direction, y);
#endif
  cpu::Rope(x, positions, inv_freq, direction, y);
}

}  // namespace

Tensor RopeInverseFrequencies(const RopeConfig& config, int64_t head_dim, DType dtype) {
  KELVIN_CHECK(head_dim > 0 && head_dim % 2 == 0)
      << "RopeInverseFrequencies: head_dim must be even and positive, got " << head_dim;
  KELVIN_CHECK_GT(config.theta, 0.0) << "RopeInverseFrequencies: rope_theta must be positive";
  if (config.llama3_scaling) {
    KELVIN_CHECK(config.factor > 0 && config.low_freq_factor > 0 &&
                 config.high_freq_factor > config.low_freq_factor &&
                 config.original_max_position > 0)
        << "RopeInverseFrequencies: llama3 scaling needs factor > 0, 0 < low_freq_factor < "
           "high_freq_factor and original_max_position > 0; got factor "
        << config.factor << ", low_freq_factor " << config.low_freq_factor << ", high_freq_factor "
        << config.high_freq_factor << ", original_max_position " << config.original_max_position;
  }
  Tensor inv_freq = Tensor::Empty({head_dim / 2}, dtype);  // [d/2]
  DispatchCpuFloat(dtype, "RopeInverseFrequencies",
                   [&]<typename T>() { InverseFrequencies(config, head_dim, inv_freq.data<T>()); });
  return inv_freq;
}

void RopeForward(const Context& ctx, const Tensor& x, const Tensor& positions,
                 const Tensor& inv_freq, Tensor& y) {
  CheckArguments(ctx, x, positions, inv_freq, y, "RopeForward");
  Dispatch(ctx, x, positions, inv_freq, RopeDirection::kForward, y);
}

void RopeBackward(const Context& ctx, const Tensor& dy, const Tensor& positions,
                  const Tensor& inv_freq, Tensor& dx) {
  CheckArguments(ctx, dy, positions, inv_freq, dx, "RopeBackward");
  Dispatch(ctx, dy, positions, inv_freq, RopeDirection::kBackward, dx);
}

}  // namespace kelvin::ops
