// The tiled CPU SSA attention operator (ssa/ssa_attention.h), f32 forward + backward, against
// baselines measured in the same run: the same math composed of the library's unfused ops
// (naive_f32) and the naive f64 reference (reference_f64). `--benchmark_filter=/kelvin/` gives the
// numbers bench/ssa_cpu_vs_torch.sh compares to PyTorch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/baselines/naive_attention.h"
#include "bench/ratio_reporter.h"
#include "core/context.h"
#include "core/ops/rope.h"
#include "core/tensor.h"
#include "ssa/reference/ssa_attention_reference.h"
#include "ssa/ssa_attention.h"
#include "ssa/temperature.h"

namespace kelvin {
namespace {

using ssa::SsaAttentionGrads;
using ssa::SsaAttentionInputs;
using ssa::SsaAttentionOutputs;
using ssa::SsaOptions;
using ssa::SsaParameters;

const Context& Cpu() {
  static const Context ctx = Context::Cpu();
  return ctx;
}

// B = 1. Rate: GFLOP/s, counting 14 d FLOPs per visible (query, key) pair and query head (forward
// S and PV, backward S, dP, dV, dK, dQ: 2 d each); causal: T (T + 1) / 2 pairs.
struct Case {
  int64_t h, g, t;
  int64_t d = 128;
  std::string Name() const { return absl::StrCat("H", h, "G", g, "_d", d, "_T", t); }
  double Flops() const { return 14.0 * d * h * (static_cast<double>(t) * (t + 1) / 2); }
};

Tensor Uniform(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::Empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(dist(rng));
    } else {
      t.data<double>()[i] = dist(rng);
    }
  }
  return t;
}

Tensor Zeros(const Shape& shape, DType dtype) { return Tensor::ZerosCpu(shape, dtype); }

// One row of T tokens (positions 0..T-1) with its outputs and gradients, in
// `dtype`.
struct Problem {
  SsaOptions options;
  ssa::SsaBlockShape shape;
  SsaAttentionInputs in;
  SsaParameters params;
  Tensor dout;  // [T, H, d]
  SsaAttentionOutputs out;
  SsaAttentionGrads grads;

  Problem(const SsaOptions& o, const Case& c, DType dtype)
      : options(o), shape(ssa::SsaBlockShape::Full(1, c.t)) {
    const int64_t n = c.t;
    in.u = Uniform({n, c.h, c.d}, dtype, 1, -2, 2);
    in.query_positions = Tensor::Empty({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) in.query_positions.data<int32_t>()[i] = static_cast<int32_t>(i);
    in.k = Uniform({n, c.g, c.d}, dtype, 2, -2, 2);
    in.v = Uniform({n, c.g, c.d}, dtype, 3, -1, 1);
    in.inv_freq = ops::RopeInverseFrequencies(ops::RopeConfig{}, c.d, dtype);
    params = {Uniform({c.h, c.d}, dtype, 4, -0.1, 0.1), Uniform({c.g, c.d}, dtype, 5, -0.1, 0.1),
              Uniform({c.h}, dtype, 6, -8, -7)};
    dout = Uniform({n, c.h, c.d}, dtype, 7, -1, 1);
    out = {Zeros({n, c.h, c.d}, dtype), Zeros({n, c.h}, dtype), Zeros({n, c.h}, dtype),
           Zeros({n, c.g}, dtype)};
    grads = {Zeros({n, c.h, c.d}, dtype),
             Zeros({n, c.g, c.d}, dtype),
             Zeros({n, c.g, c.d}, dtype),
             {},
             {},
             {Zeros({c.h, c.d}, dtype), Zeros({c.g, c.d}, dtype), Zeros({c.h}, dtype)}};
  }
};

void Report(::benchmark::State& state, const Case& c) {
  state.counters["GFLOP/s"] =
      ::benchmark::Counter(c.Flops() / 1e9, ::benchmark::Counter::kIsIterationInvariantRate);
}

void RunKelvin(::benchmark::State& state, SsaOptions options, Case c) {
  Problem p(options, c, DType::kF32);
  auto step = [&] {
    ssa::SsaAttentionForward(Cpu(), p.options, p.shape, p.in, p.params, p.out);
    ssa::SsaAttentionBackward(Cpu(), p.options, p.shape, p.dout, p.in, p.params, p.out, p.grads);
  };
  step();  // warm-up: thread start-up and first touch stay out of the timing
  for (auto _ : state) step();
  Report(state, c);
}

// x [N, K, d] *= tau [N, K] (one scalar per token and head).
void ScaleHeads(Tensor& x, const Tensor& tau) {
  const int64_t rows = tau.numel(), d = x.dim(2);
  float* xv = x.data<float>();
  const float* t = tau.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < d; ++e) xv[r * d + e] *= t[r];
  }
}

// dtau [N, K] = rowwise a . b over [N, K, d].
void RowDots(const Tensor& a, const Tensor& b, Tensor& dtau) {
  const int64_t rows = dtau.numel(), d = a.dim(2);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    for (int64_t e = 0; e < d; ++e) sum += a.data<float>()[r * d + e] * b.data<float>()[r * d + e];
    dtau.data<float>()[r] = sum;
  }
}

// naive_f32, the unfused composition: the temperatures of ssa/temperature.h, RoPE, elementwise
// multiplies and the scalar plain attention of bench/baselines/naive_attention.h (OpenMP over rows,
// one query at a time, no GEMM); without temperatures (group "vanilla") it skips them.
void RunNaive(::benchmark::State& state, SsaOptions options, Case c) {
  Problem p(options, c, DType::kF32);
  const SsaOptions& o = p.options;
  const SsaAttentionInputs& in = p.in;
  const int64_t n = c.t;
  const bench::AttentionShape shape{1, c.t};
  Tensor tau_q = Zeros({n, c.h}, DType::kF32), tanh_q = Zeros({n, c.h}, DType::kF32);
  Tensor tau_v = Zeros({n, c.g}, DType::kF32), tanh_v = Zeros({n, c.g}, DType::kF32);
  Tensor rope_u = Zeros(in.u.shape(), DType::kF32), q = Zeros(in.u.shape(), DType::kF32);
  Tensor k = Zeros(in.k.shape(), DType::kF32), v = Zeros(in.k.shape(), DType::kF32);
  Tensor lse = Zeros({n, c.h}, DType::kF32);
  Tensor dq = Zeros(in.u.shape(), DType::kF32), dk = Zeros(in.k.shape(), DType::kF32);
  Tensor dv = Zeros(in.k.shape(), DType::kF32);
  Tensor dtau_q = Zeros({n, c.h}, DType::kF32), dtau_v = Zeros({n, c.g}, DType::kF32);
  auto step = [&] {
    if (o.query_temperature) {
      ssa::QueryTemperatureForward(Cpu(), o, in.u, p.params.query_readout, p.params.alpha,
                                   in.query_positions, tau_q, tanh_q);
    }
    if (o.value_temperature) {
      ssa::ValueTemperatureForward(Cpu(), o, in.v, p.params.value_readout, tau_v, tanh_v);
    }
    ops::RopeForward(Cpu(), in.u, in.query_positions, in.inv_freq, rope_u);
    ops::RopeForward(Cpu(), in.u, in.query_positions, in.inv_freq, q);
    if (o.query_temperature) ScaleHeads(q, tau_q);
    ops::RopeForward(Cpu(), in.k, in.query_positions, in.inv_freq, k);
    std::copy_n(in.v.data<float>(), in.v.numel(), v.data<float>());
    if (o.value_temperature) ScaleHeads(v, tau_v);
    bench::NaiveAttentionForward(shape, q, k, v, in.query_positions, p.out.out, lse);

    bench::NaiveAttentionBackward(shape, p.dout, q, k, v, in.query_positions, p.out.out, lse, dq,
                                  dk, dv);
    if (o.query_temperature) {
      RowDots(rope_u, dq, dtau_q);
      ScaleHeads(dq, tau_q);
    }
    ops::RopeBackward(Cpu(), dq, in.query_positions, in.inv_freq, p.grads.du);
    ops::RopeBackward(Cpu(), dk, in.query_positions, in.inv_freq, p.grads.dk);
    if (o.value_temperature) {
      RowDots(in.v, dv, dtau_v);
      ScaleHeads(dv, tau_v);
    }
    std::copy_n(dv.data<float>(), dv.numel(), p.grads.dv.data<float>());
    if (o.query_temperature) {
      ssa::QueryTemperatureBackward(Cpu(), o, dtau_q, in.u, p.params.query_readout, p.params.alpha,
                                    in.query_positions, tanh_q, p.grads.du,
                                    p.grads.params.query_readout, p.grads.params.alpha);
    }
    if (o.value_temperature) {
      ssa::ValueTemperatureBackward(Cpu(), o, dtau_v, in.v, p.params.value_readout, tanh_v,
                                    p.grads.dv, p.grads.params.value_readout);
    }
  };
  step();
  for (auto _ : state) step();
  Report(state, c);
}

// reference_f64: the naive f64 reference of ssa/reference/ (single-threaded, f64 inputs).
void RunReference(::benchmark::State& state, SsaOptions options, Case c) {
  Problem p(options, c, DType::kF64);
  for (auto _ : state) {
    ssa::reference::SsaAttentionForward(p.options, p.shape, p.in, p.params, p.out);
    ssa::reference::SsaAttentionBackward(p.options, p.shape, p.dout, p.in, p.params, p.grads);
  }
  Report(state, c);
}

// Each implementation for at least kMinSeconds of wall time: the development
// machine's cores are shared, so short runs would mostly measure the
// neighbours. The f64 reference takes tens of seconds per step at T = 2048: one
// iteration.
// Group "ssa" runs the default SSA options, group "vanilla" VanillaAttentionOptions(); d = 128,
// H = 8, G = 2 at T = 512, 1024, 2048 (reference_f64 at these only) and H = 32, G = 8 at T = 1024.
constexpr double kMinSeconds = 2.0;
const bool kRegistered = [] {
  const std::vector<Case> cases = {{8, 2, 512}, {8, 2, 1024}, {8, 2, 2048}, {32, 8, 1024}};
  const std::pair<const char*, SsaOptions> groups[] = {{"ssa", SsaOptions{}},
                                                       {"vanilla", ssa::VanillaAttentionOptions()}};
  for (const auto& [group, options] : groups) {
    for (const Case& c : cases) {
      ::benchmark::RegisterBenchmark(absl::StrCat(group, "/kelvin/", c.Name()).c_str(), RunKelvin,
                                     options, c)
          ->UseRealTime()
          ->MinTime(kMinSeconds)
          ->Unit(::benchmark::kMillisecond);
      ::benchmark::RegisterBenchmark(absl::StrCat(group, "/naive_f32/", c.Name()).c_str(), RunNaive,
                                     options, c)
          ->UseRealTime()
          ->MinTime(kMinSeconds)
          ->Unit(::benchmark::kMillisecond);
      if (c.h == 8) {
        ::benchmark::RegisterBenchmark(absl::StrCat(group, "/reference_f64/", c.Name()).c_str(),
                                       RunReference, options, c)
            ->UseRealTime()
            ->MinTime(kMinSeconds)
            ->Unit(::benchmark::kMillisecond);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace kelvin

KELVIN_BENCHMARK_MAIN()
