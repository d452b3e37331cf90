// SSA temperatures on the CPU: one loop over (token, head) shared by the query and the value
// temperature, OpenMP over the tokens; the per-element GeLU math in the accumulation type (f32
// rows vectorised by cpu_vector_math.h, f64 with libm's erf), tanh, the position term and the
// parameter-gradient sums in double.
#include "ssa/temperature.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "core/copy.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "ssa/cpu_vector_math.h"

namespace kelvin::ssa {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Exact (erf) GeLU = x Phi(x) in f64 (the f32 rows are cpu::GeluDotF32 and its backward).
double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }
// GeLU and its derivative Phi(x) + x phi(x) sharing one erf (the backward needs both).
void GeluAndDerivative(double x, double& gelu, double& derivative) {
  const double phi = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
  gelu = x * phi;
  derivative = phi + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Which terms one temperature has under the options: the query temperature may have all three,
// the value temperature never has the position term.
struct Terms {
  bool active;    // the temperature is on (off: exactly 1, no gradient)
  bool token;     // tanh(a . GeLU(source))
  bool position;  // sigma(alpha) ln(p + 1)
  std::optional<TemperatureClamp> clamp;
};

Terms QueryTerms(const SsaOptions& o) {
  return {o.query_temperature, o.token_aware, o.position_aware, o.temperature_clamp};
}
Terms ValueTerms(const SsaOptions& o) {
  return {o.value_temperature, o.token_aware, false, o.temperature_clamp};
}

// The tensors of one temperature; alpha and positions are undefined for the value temperature.
struct Args {
  const Tensor& source;     // [N, K, d] (K = H or G)
  const Tensor& readout;    // [K, d]
  const Tensor& alpha;      // [K]
  const Tensor& positions;  // [N] i32
};

void CheckArgs(const Context& ctx, const Terms& terms, const Args& a, const Tensor& tau,
               const Tensor& tanh_z, const char* op) {
  KELVIN_CHECK(!ctx.is_cuda()) << op << " runs on the CPU only: on CUDA the fused SSA attention "
                               << "operator computes the temperatures as it loads its tiles";
  KELVIN_CHECK_EQ(a.source.ndim(), 3)
      << op << ".source must be [N, heads, d], got " << a.source.ToString();
  const int64_t n = a.source.dim(0), heads = a.source.dim(1), d = a.source.dim(2);
  const DType dtype = a.source.dtype(), accum = AccumDType(dtype);
  KELVIN_CHECK(dtype == DType::kF32 || dtype == DType::kF64)
      << op << " supports f32 and f64, got " << a.source.ToString();
  ops::CheckShape(a.readout, {heads, d}, std::string(op) + ".readout");
  ops::CheckDType(a.readout, dtype, std::string(op) + ".readout");
  ops::CheckShape(tau, {n, heads}, std::string(op) + ".tau");
  ops::CheckDType(tau, accum, std::string(op) + ".tau");
  ops::CheckShape(tanh_z, {n, heads}, std::string(op) + ".tanh_z");
  ops::CheckDType(tanh_z, accum, std::string(op) + ".tanh_z");
  ops::CheckDevice(ctx, {&a.source, &a.readout, &tau, &tanh_z}, op);
  if (a.alpha.defined()) {
    ops::CheckShape(a.alpha, {heads}, std::string(op) + ".alpha");
    ops::CheckDType(a.alpha, dtype, std::string(op) + ".alpha");
    ops::CheckShape(a.positions, {n}, std::string(op) + ".positions");
    ops::CheckDType(a.positions, DType::kI32, std::string(op) + ".positions");
    ops::CheckDevice(ctx, {&a.alpha, &a.positions}, op);
    const int32_t* p = a.positions.data<int32_t>();
    for (int64_t t = 0; t < n; ++t) {
      KELVIN_CHECK_GE(p[t], 0) << op << ".positions[" << t << "] is negative";
    }
  }
  if (terms.clamp.has_value()) {
    KELVIN_CHECK(terms.clamp->lo < terms.clamp->hi)
        << op << ": temperature clamp [" << terms.clamp->lo << ", " << terms.clamp->hi
        << "] is empty (ValidateSsaOptions refuses it)";
  }
}

// Element i of a host float tensor (f32, bf16, f64) as a double.
double ValueAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kBF16:
      return static_cast<float>(t.data<bf16>()[i]);
    case DType::kF64:
      return t.data<double>()[i];
    default:
      KELVIN_FATAL() << "expected a float tensor, got " << t.ToString();
  }
}

// sigma(alpha_k) for every head (0 without the position term).
std::vector<double> PositionSlopes(const Terms& terms, const Tensor& alpha, int64_t heads) {
  std::vector<double> slopes(static_cast<size_t>(heads), 0.0);
  if (terms.position) {
    for (int64_t k = 0; k < heads; ++k) slopes[k] = Sigmoid(ValueAt(alpha, k));
  }
  return slopes;
}

double LogCount(const Args& a, int64_t token) {
  return a.alpha.defined() ? std::log(static_cast<double>(a.positions.data<int32_t>()[token]) + 1)
                           : 0.0;
}

template <typename T>
void Forward(const Terms& terms, const Args& a, Tensor& tau, Tensor& tanh_z) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, float, double>;
  const int64_t n = a.source.dim(0), heads = a.source.dim(1), d = a.source.dim(2);
  const T* src = a.source.data<T>();
  const T* readout = a.readout.data<T>();
  const std::vector<double> slopes = PositionSlopes(terms, a.alpha, heads);
  Acc* tau_out = tau.data<Acc>();
  Acc* tanh_out = tanh_z.data<Acc>();
#pragma omp parallel for schedule(static) if (n * heads * d >= ops::cpu::kParallelElements)
  for (int64_t t = 0; t < n; ++t) {
    const double log_n = LogCount(a, t);
    for (int64_t k = 0; k < heads; ++k) {
      double tz = 0;
      if (terms.active && terms.token) {
        const T* row = src + (t * heads + k) * d;
        Acc z = 0;
        if constexpr (std::is_same_v<T, float>) {
          z = cpu::GeluDotF32(row, readout + k * d, d);
        } else {
          for (int64_t e = 0; e < d; ++e) z += readout[k * d + e] * Gelu(row[e]);
        }
        tz = std::tanh(static_cast<double>(z));
      }
      double value = 1.0;
      if (terms.active) {
        value = tz + 1.0 + slopes[k] * log_n;
        if (terms.clamp) value = std::clamp(value, terms.clamp->lo, terms.clamp->hi);
      }
      tau_out[t * heads + k] = static_cast<Acc>(value);
      tanh_out[t * heads + k] = static_cast<Acc>(tz);
    }
  }
}

template <typename T>
void Backward(const Terms& terms, const Args& a, const Tensor& dtau, const Tensor& tanh_z,
              Tensor& dsource, Tensor& dreadout, Tensor* dalpha) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, float, double>;
  if (!terms.active) return;
  const int64_t n = a.source.dim(0), heads = a.source.dim(1), d = a.source.dim(2);
  const T* src = a.source.data<T>();
  const T* readout = a.readout.data<T>();
  const Acc* dtau_in = dtau.data<Acc>();
  const Acc* tanh_in = tanh_z.data<Acc>();
  T* dsrc = dsource.data<T>();
  const std::vector<double> slopes = PositionSlopes(terms, a.alpha, heads);
  // Tokens in fixed chunks, each with its own parameter-gradient sums, added in chunk order: the
  // sums do not depend on the thread count.
  constexpr int64_t kChunkTokens = 256;
  const int64_t chunks = (n + kChunkTokens - 1) / kChunkTokens;
  std::vector<double> dreadout_sums(static_cast<size_t>(chunks * heads * d), 0.0);  // [C, K, d]
  std::vector<double> dalpha_sums(static_cast<size_t>(chunks * heads), 0.0);        // [C, K]
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double* dreadout_sum = dreadout_sums.data() + c * heads * d;
    double* dalpha_sum = dalpha_sums.data() + c * heads;
    for (int64_t t = c * kChunkTokens; t < std::min(n, (c + 1) * kChunkTokens); ++t) {
      const double log_n = LogCount(a, t);
      for (int64_t k = 0; k < heads; ++k) {
        const double tz = tanh_in[t * heads + k];
        double dt = dtau_in[t * heads + k];
        if (terms.clamp) {
          const double unclamped = tz + 1.0 + slopes[k] * log_n;
          if (unclamped < terms.clamp->lo || unclamped > terms.clamp->hi) dt = 0;
        }
        dalpha_sum[k] += dt * slopes[k] * (1.0 - slopes[k]) * log_n;
        if (!terms.token) continue;
        const Acc dz = static_cast<Acc>(dt * (1.0 - tz * tz));
        if (dz == 0) continue;  // nothing flows back (e.g. clamped, or no gradient)
        const T* row = src + (t * heads + k) * d;
        T* drow = dsrc + (t * heads + k) * d;
        if constexpr (std::is_same_v<T, float>) {
          cpu::GeluDotBackwardF32(row, readout + k * d, dz, dreadout_sum + k * d, drow, d);
        } else {
          for (int64_t e = 0; e < d; ++e) {
            double gelu, derivative;
            GeluAndDerivative(row[e], gelu, derivative);
            dreadout_sum[k * d + e] += dz * gelu;
            drow[e] += dz * readout[k * d + e] * derivative;
          }
        }
      }
    }
  }
  std::vector<double> dreadout_sum(static_cast<size_t>(heads * d), 0.0);  // [K, d]
  std::vector<double> dalpha_sum(static_cast<size_t>(heads), 0.0);        // [K]
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t i = 0; i < heads * d; ++i) dreadout_sum[i] += dreadout_sums[c * heads * d + i];
    for (int64_t k = 0; k < heads; ++k) dalpha_sum[k] += dalpha_sums[c * heads + k];
  }
  Acc* dreadout_out = dreadout.data<Acc>();
  for (int64_t i = 0; i < heads * d; ++i) dreadout_out[i] += static_cast<Acc>(dreadout_sum[i]);
  if (dalpha != nullptr && terms.position) {
    Acc* dalpha_out = dalpha->data<Acc>();
    for (int64_t k = 0; k < heads; ++k) dalpha_out[k] += static_cast<Acc>(dalpha_sum[k]);
  }
}

void CheckGradients(const Context& ctx, const Args& a, const Tensor& dtau, const Tensor& dsource,
                    const Tensor& dreadout, const Tensor* dalpha, const char* op) {
  const DType accum = AccumDType(a.source.dtype());
  ops::CheckShape(dtau, {a.source.dim(0), a.source.dim(1)}, std::string(op) + ".dtau");
  ops::CheckDType(dtau, accum, std::string(op) + ".dtau");
  ops::CheckShape(dsource, a.source.shape(), std::string(op) + ".dsource");
  ops::CheckDType(dsource, a.source.dtype(), std::string(op) + ".dsource");
  ops::CheckShape(dreadout, a.readout.shape(), std::string(op) + ".dreadout");
  ops::CheckDType(dreadout, accum, std::string(op) + ".dreadout");
  ops::CheckDevice(ctx, {&dtau, &dsource, &dreadout}, op);
  if (dalpha != nullptr) {
    ops::CheckShape(*dalpha, a.alpha.shape(), std::string(op) + ".dalpha");
    ops::CheckDType(*dalpha, accum, std::string(op) + ".dalpha");
    ops::CheckDevice(ctx, {dalpha}, op);
  }
}

}  // namespace

void QueryTemperatureForward(const Context& ctx, const SsaOptions& options, const Tensor& source,
                             const Tensor& readout, const Tensor& alpha, const Tensor& positions,
                             Tensor& tau, Tensor& tanh_z) {
  const Terms terms = QueryTerms(options);
  const Args args{source, readout, alpha, positions};
  KELVIN_CHECK(alpha.defined()) << "ssa.query_temperature.alpha is undefined";
  CheckArgs(ctx, terms, args, tau, tanh_z, "ssa.query_temperature");
  ops::DispatchCpuFloat(source.dtype(), "ssa.query_temperature",
                        [&]<typename T>() { Forward<T>(terms, args, tau, tanh_z); });
}

void QueryTemperatureBackward(const Context& ctx, const SsaOptions& options, const Tensor& dtau,
                              const Tensor& source, const Tensor& readout, const Tensor& alpha,
                              const Tensor& positions, const Tensor& tanh_z, Tensor& dsource,
                              Tensor& dreadout, Tensor& dalpha) {
  const Terms terms = QueryTerms(options);
  const Args args{source, readout, alpha, positions};
  KELVIN_CHECK(alpha.defined()) << "ssa.query_temperature.alpha is undefined";
  CheckArgs(ctx, terms, args, dtau, tanh_z, "ssa.query_temperature");
  CheckGradients(ctx, args, dtau, dsource, dreadout, &dalpha, "ssa.query_temperature");
  ops::DispatchCpuFloat(source.dtype(), "ssa.query_temperature", [&]<typename T>() {
    Backward<T>(terms, args, dtau, tanh_z, dsource, dreadout, &dalpha);
  });
}

void ValueTemperatureForward(const Context& ctx, const SsaOptions& options, const Tensor& source,
                             const Tensor& readout, Tensor& tau, Tensor& tanh_z) {
  const Terms terms = ValueTerms(options);
  const Tensor none;
  const Args args{source, readout, none, none};
  CheckArgs(ctx, terms, args, tau, tanh_z, "ssa.value_temperature");
  ops::DispatchCpuFloat(source.dtype(), "ssa.value_temperature",
                        [&]<typename T>() { Forward<T>(terms, args, tau, tanh_z); });
}

void ValueTemperatureBackward(const Context& ctx, const SsaOptions& options, const Tensor& dtau,
                              const Tensor& source, const Tensor& readout, const Tensor& tanh_z,
                              Tensor& dsource, Tensor& dreadout) {
  const Terms terms = ValueTerms(options);
  const Tensor none;
  const Args args{source, readout, none, none};
  CheckArgs(ctx, terms, args, dtau, tanh_z, "ssa.value_temperature");
  CheckGradients(ctx, args, dtau, dsource, dreadout, nullptr, "ssa.value_temperature");
  ops::DispatchCpuFloat(source.dtype(), "ssa.value_temperature", [&]<typename T>() {
    Backward<T>(terms, args, dtau, tanh_z, dsource, dreadout, nullptr);
  });
}

namespace {

TemperatureSummary Summarise(const Tensor& values) {
  if (!values.defined()) return {};  // that temperature is off
  KELVIN_CHECK(values.is_cpu()) << "temperature statistics take host tensors, got "
                                << values.ToString();
  std::vector<double> v(static_cast<size_t>(values.numel()));
  for (int64_t i = 0; i < values.numel(); ++i) v[i] = ValueAt(values, i);
  TemperatureSummary s;
  if (v.empty()) return s;
  s.count = static_cast<int64_t>(v.size());
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  double sum = 0;
  for (const double x : v) {
    sum += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean = sum / static_cast<double>(v.size());
  double squares = 0;
  for (const double x : v) squares += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(squares / static_cast<double>(v.size()));
  return s;
}

}  // namespace

TemperatureStatistics ComputeTemperatureStatistics(const Context& ctx, const Tensor& tau_q,
                                                   const Tensor& tau_v, const Tensor& alpha) {
  const auto summarise = [&ctx](const Tensor& tau) -> TemperatureSummary {
    if (!tau.defined()) return {};  // that temperature is off
    if (tau.is_cpu()) return Summarise(tau);
    KELVIN_CHECK(ctx.is_cuda() && tau.dtype() == DType::kF32)
        << "temperature statistics on a device take f32 tensors on ctx's device, got "
        << tau.ToString();
#if KELVIN_WITH_CUDA
    return cuda::SummarizeTemperatures(ctx, tau);
#else
    return {};  // unreachable: a CPU-only build holds no device tensor
#endif
  };
  TemperatureStatistics stats;
  stats.query = summarise(tau_q);
  stats.value = summarise(tau_v);
  if (!alpha.defined()) return stats;
  const Tensor host_alpha = alpha.is_cpu() ? alpha : CopyToDevice(ctx, alpha, Device::Cpu());
  for (int64_t k = 0; k < host_alpha.numel(); ++k) {
    stats.sigma_alpha.push_back(Sigmoid(ValueAt(host_alpha, k)));
  }
  return stats;
}

TemperatureSummary MergeTemperatureSummaries(const std::vector<TemperatureSummary>& parts) {
  if (parts.size() == 1) return parts.front();  // exactly, not through the moments
  TemperatureSummary merged;
  double sum = 0, squares = 0;  // of the values, from each part's mean and variance
  for (const TemperatureSummary& part : parts) {
    if (part.count == 0) continue;
    const double count = static_cast<double>(part.count);
    sum += count * part.mean;
    squares += count * (part.std * part.std + part.mean * part.mean);
    merged.min = merged.count == 0 ? part.min : std::min(merged.min, part.min);
    merged.max = merged.count == 0 ? part.max : std::max(merged.max, part.max);
    merged.count += part.count;
  }
  if (merged.count == 0) return merged;
  const double count = static_cast<double>(merged.count);
  merged.mean = sum / count;
  merged.std = std::sqrt(std::max(0.0, squares / count - merged.mean * merged.mean));
  return merged;
}

}  // namespace kelvin::ssa
