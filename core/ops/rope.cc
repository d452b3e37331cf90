// RoPE: the inverse frequencies and attention factor of each scaling type (transformers' formulas),
// argument checks and dispatch to the CPU or CUDA kernel.
#include "core/ops/rope.h"

#include <algorithm>
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

// One inverse frequency of default RoPE, as torch computes
//   1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
// with base ** tensor taken as pow(float(base), exponent) per element: the i-th pair's
// theta^(2i/d) (returned; the caller takes its reciprocal, as every scaling starts from it).
template <typename T>
T ThetaPower(double theta, int64_t i, int64_t head_dim) {
  const T exponent = static_cast<T>(2 * i) / static_cast<T>(head_dim);
  return std::pow(static_cast<T>(theta), exponent);
}

// transformers' _compute_yarn_parameters correction range (in double, as Python computes it): the
// dimensions [low, high] between which the ramp blends interpolation into extrapolation.
struct YarnRange {
  double low, high;
};
YarnRange YarnCorrectionRange(const RopeConfig& c, int64_t head_dim) {
  const double beta_fast = c.beta_fast.value_or(0) != 0 ? *c.beta_fast : 32.0;
  const double beta_slow = c.beta_slow.value_or(0) != 0 ? *c.beta_slow : 1.0;
  const double dim = static_cast<double>(head_dim);
  const auto correction_dim = [&](double rotations) {
    return (dim * std::log(static_cast<double>(c.original_max_position) /
                           (rotations * 2 * std::numbers::pi))) /
           (2 * std::log(c.theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (c.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  YarnRange range{std::max(low, 0.0), std::min(high, dim - 1)};
  if (range.low == range.high) range.high += 0.001;  // transformers' guard against 0 / 0
  return range;
}

// The YaRN inverse frequency of pair i, torch's float32 steps one by one:
//   inv_freq_extrapolation = 1.0 / pos_freqs; inv_freq_interpolation = 1.0 / (factor * pos_freqs)
//   ramp = clamp((arange(d/2) - low) / (high - low), 0, 1); extrapolation_factor = 1 - ramp
//   inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
template <typename T>
T YarnInverseFrequency(const RopeConfig& c, const YarnRange& range, int64_t i, int64_t head_dim) {
  const T pos_freq = ThetaPower<T>(c.theta, i, head_dim);
  const T extrapolation = T(1) / pos_freq;
  const T interpolation = T(1) / (static_cast<T>(c.factor) * pos_freq);
  const T linear =
      (static_cast<T>(i) - static_cast<T>(range.low)) / static_cast<T>(range.high - range.low);
  const T ramp = std::clamp(linear, T(0), T(1));
  const T extrapolation_factor = T(1) - ramp;
  return interpolation * (T(1) - extrapolation_factor) + extrapolation * extrapolation_factor;
}

// Dynamic NTK's base for a call of seq_len > original_max_position positions, as transformers'
// _compute_dynamic_ntk_parameters computes it from the forward's max(position_ids) + 1 (a tensor,
// so in float32 steps):
//   base * ((factor * seq_len / original) - (factor - 1)) ** (dim / (dim - 2))
// where the exponent is a Python float rounded to T.
template <typename T>
T DynamicBase(const RopeConfig& c, int64_t seq_len, int64_t head_dim) {
  const T scaled =
      static_cast<T>(c.factor) * static_cast<T>(seq_len) / static_cast<T>(c.original_max_position) -
      static_cast<T>(c.factor - 1);
  const T exponent =
      static_cast<T>(static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
  return static_cast<T>(c.theta) * std::pow(scaled, exponent);
}

// seq_len: the call's max position + 1 (read by dynamic only).
template <typename T>
void InverseFrequencies(const RopeConfig& config, int64_t head_dim, bool long_factors,
                        int64_t seq_len, T* inv_freq) {
  const YarnRange range =
      config.type == RopeType::kYarn ? YarnCorrectionRange(config, head_dim) : YarnRange{0, 0};
  // Dynamic beyond the original length: the base it scales (within it: rope_theta, exactly).
  const bool dynamic = config.type == RopeType::kDynamic && seq_len > config.original_max_position;
  const double dynamic_base =
      dynamic ? static_cast<double>(DynamicBase<T>(config, seq_len, head_dim)) : config.theta;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const T plain = T(1) / ThetaPower<T>(config.theta, i, head_dim);
    switch (config.type) {
      case RopeType::kDefault:
        inv_freq[i] = plain;
        break;
      case RopeType::kDynamic:
        inv_freq[i] = T(1) / ThetaPower<T>(dynamic_base, i, head_dim);
        break;
      case RopeType::kLinear:
        inv_freq[i] = plain / static_cast<T>(config.factor);
        break;
      case RopeType::kYarn:
        inv_freq[i] = YarnInverseFrequency<T>(config, range, i, head_dim);
        break;
      case RopeType::kLongrope: {
        const std::vector<double>& factors =
            long_factors ? config.long_factor : config.short_factor;
        inv_freq[i] =
            T(1) / (static_cast<T>(factors[i]) * ThetaPower<T>(config.theta, i, head_dim));
        break;
      }
      case RopeType::kLlama3:
        inv_freq[i] = Llama3Scaled(plain, config);
        break;
    }
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
              const Tensor& inv_freq, RopeDirection direction, Tensor& y, double attention_factor) {
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Rope(ctx, x, positions, inv_freq, direction, y, attention_factor);
#endif
  cpu::Rope(x, positions, inv_freq, direction, y, attention_factor);
}

// transformers' get_mscale: 0.1 * mscale * ln(scale) + 1 above scale 1, else 1.
double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

const char* RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLongrope:
      return "longrope";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kDynamic:
      return "dynamic";
  }
  return "?";
}

bool RopeUsesLongFactors(const RopeConfig& config, int64_t max_position) {
  return config.type == RopeType::kLongrope && max_position + 1 > config.original_max_position;
}

bool RopeDependsOnCall(const RopeConfig& config) {
  return config.type == RopeType::kLongrope || config.type == RopeType::kDynamic;
}

bool RopeScalesCall(const RopeConfig& config, int64_t max_position) {
  return RopeDependsOnCall(config) && max_position + 1 > config.original_max_position;
}

Tensor RopeInverseFrequencies(const RopeConfig& config, int64_t head_dim, DType dtype,
                              bool long_factors) {
  return RopeCallInverseFrequencies(config, head_dim, dtype,
                                    long_factors ? config.original_max_position : 0);
}

Tensor RopeCallInverseFrequencies(const RopeConfig& config, int64_t head_dim, DType dtype,
                                  int64_t max_position) {
  KELVIN_CHECK(head_dim > 0 && head_dim % 2 == 0)
      << "RopeInverseFrequencies: head_dim must be even and positive, got " << head_dim;
  KELVIN_CHECK_GT(config.theta, 0.0) << "RopeInverseFrequencies: rope_theta must be positive";
  // The rules users meet are models::RopeScalingProblems; these only guard the arithmetic.
  KELVIN_CHECK(config.type == RopeType::kDefault ||
               (config.factor > 0 && config.original_max_position > 0))
      << "RopeInverseFrequencies: " << RopeTypeName(config.type)
      << " scaling needs factor > 0 and original_max_position > 0; got factor " << config.factor
      << ", original_max_position " << config.original_max_position;
  if (config.type == RopeType::kLlama3) {
    KELVIN_CHECK(config.low_freq_factor > 0 && config.high_freq_factor > config.low_freq_factor)
        << "RopeInverseFrequencies: llama3 scaling needs 0 < low_freq_factor < high_freq_factor; "
           "got "
        << config.low_freq_factor << ", " << config.high_freq_factor;
  }
  if (config.type == RopeType::kLongrope) {
    const size_t half = static_cast<size_t>(head_dim / 2);
    KELVIN_CHECK(config.short_factor.size() == half && config.long_factor.size() == half)
        << "RopeInverseFrequencies: longrope needs " << half << " short and long factors, got "
        << config.short_factor.size() << " and " << config.long_factor.size();
  }
  if (config.type == RopeType::kDynamic) {
    KELVIN_CHECK(head_dim > 2) << "RopeInverseFrequencies: dynamic scaling needs head_dim > 2";
  }
  Tensor inv_freq = Tensor::Empty({head_dim / 2}, dtype);  // [d/2]
  DispatchCpuFloat(dtype, "RopeInverseFrequencies", [&]<typename T>() {
    InverseFrequencies(config, head_dim, RopeUsesLongFactors(config, max_position),
                       max_position + 1, inv_freq.data<T>());
  });
  return inv_freq;
}

double RopeAttentionFactor(const RopeConfig& config) {
  if (config.type == RopeType::kYarn) {
    if (config.attention_factor.has_value()) return *config.attention_factor;
    // transformers: `if mscale and mscale_all_dim` (0 counts as unset).
    if (config.mscale.value_or(0) != 0 && config.mscale_all_dim.value_or(0) != 0) {
      return YarnMscale(config.factor, *config.mscale) /
             YarnMscale(config.factor, *config.mscale_all_dim);
    }
    return YarnMscale(config.factor, 1.0);
  }
  if (config.type == RopeType::kLongrope) {
    if (config.attention_factor.has_value()) return *config.attention_factor;
    if (config.factor <= 1.0) return 1.0;
    return std::sqrt(1 + std::log(config.factor) /
                             std::log(static_cast<double>(config.original_max_position)));
  }
  return 1.0;
}

void RopeForward(const Context& ctx, const Tensor& x, const Tensor& positions,
                 const Tensor& inv_freq, Tensor& y, double attention_factor) {
  CheckArguments(ctx, x, positions, inv_freq, y, "RopeForward");
  Dispatch(ctx, x, positions, inv_freq, RopeDirection::kForward, y, attention_factor);
}

void RopeBackward(const Context& ctx, const Tensor& dy, const Tensor& positions,
                  const Tensor& inv_freq, Tensor& dx, double attention_factor) {
  CheckArguments(ctx, dy, positions, inv_freq, dx, "RopeBackward");
  Dispatch(ctx, dy, positions, inv_freq, RopeDirection::kBackward, dx, attention_factor);
}

}  // namespace kelvin::ops
