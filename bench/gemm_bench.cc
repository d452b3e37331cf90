// CPU GEMM: ops::Gemm against raw cblas_sgemm on the same buffers (the wrapper must add no
// overhead) for f32 at [M, N, K] = 1024^3 and 4096 x 4096 x 512; and, for information, bf16 inputs
// (widened to f32 inside Gemm, f32 C) against sgemm on f32 copies of the same values.
// M rows of C, N columns of C, K contracted; all row-major, no transposes.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/ratio_reporter.h"
#include "core/context.h"
#include "core/ops/gemm.h"
#include "core/ops/reference/values.h"

namespace kelvin {
namespace {

struct GemmCase {
  int64_t m, n, k;
  std::string Name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
  double GflopPerIteration() const { return 2.0 * static_cast<double>(m * n * k) / 1e9; }
};

constexpr GemmCase kCases[] = {{1024, 1024, 1024}, {4096, 4096, 512}};

Tensor RandomTensor(const Shape& shape, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(NumElements(shape)));
  for (double& v : values) v = dist(rng);
  Tensor t = Tensor::Empty(shape, dtype);
  reference::FromDoubles(values, t);
  return t;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  Tensor out = Tensor::Empty(t.shape(), dtype);
  reference::FromDoubles(reference::ToDoubles(t), out);
  return out;
}

// One case's buffers, shared by the kelvin and the baseline benchmark.
struct Operands {
  Tensor a;  // [M, K], the case's input dtype
  Tensor b;  // [K, N], the case's input dtype
  Tensor c;  // [M, N] f32
};

void SetRate(benchmark::State& state, const GemmCase& shape) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(shape.GflopPerIteration(), benchmark::Counter::kIsIterationInvariantRate);
}

void KelvinGemm(benchmark::State& state, const GemmCase& shape, Operands& x) {
  const Context ctx = Context::Cpu();
  for (auto _ : state) {
    ops::Gemm(ctx, x.a, /*transpose_a=*/false, x.b, /*transpose_b=*/false, x.c);
    benchmark::ClobberMemory();
  }
  SetRate(state, shape);
}

// a and b f32.
void RawSgemm(benchmark::State& state, const GemmCase& shape, Operands& x) {
  const int m = static_cast<int>(shape.m), n = static_cast<int>(shape.n);
  const int k = static_cast<int>(shape.k);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x.a.data<float>(), k,
                x.b.data<float>(), n, 0.0f, x.c.data<float>(), n);
    benchmark::ClobberMemory();
  }
  SetRate(state, shape);
}

void Register(const std::string& name, void (*fn)(benchmark::State&, const GemmCase&, Operands&),
              const GemmCase& shape, std::shared_ptr<Operands> operands) {
  benchmark::RegisterBenchmark(
      name.c_str(), [fn, shape, operands](benchmark::State& state) { fn(state, shape, *operands); })
      ->UseRealTime()  // OpenBLAS runs on its own threads
      ->Unit(benchmark::kMillisecond);
}

// Kelvin and baseline interleaved per case, so machine noise hits both alike.
[[maybe_unused]] const bool kRegistered = [] {
  for (const GemmCase& shape : kCases) {
    auto f32 = std::make_shared<Operands>(Operands{RandomTensor({shape.m, shape.k}, DType::kF32, 1),
                                                   RandomTensor({shape.k, shape.n}, DType::kF32, 2),
                                                   Tensor::Empty({shape.m, shape.n}, DType::kF32)});
    Register("gemm_f32/kelvin/" + shape.Name(), KelvinGemm, shape, f32);
    Register("gemm_f32/openblas/" + shape.Name(), RawSgemm, shape, f32);
  }
  for (const GemmCase& shape : kCases) {
    auto bf16_inputs =
        std::make_shared<Operands>(Operands{RandomTensor({shape.m, shape.k}, DType::kBF16, 1),
                                            RandomTensor({shape.k, shape.n}, DType::kBF16, 2),
                                            Tensor::Empty({shape.m, shape.n}, DType::kF32)});
    auto f32_copies = std::make_shared<Operands>(
        Operands{CastTo(bf16_inputs->a, DType::kF32), CastTo(bf16_inputs->b, DType::kF32),
                 Tensor::Empty({shape.m, shape.n}, DType::kF32)});
    Register("gemm_bf16_inputs/kelvin/" + shape.Name(), KelvinGemm, shape, bf16_inputs);
    Register("gemm_bf16_inputs/openblas_sgemm/" + shape.Name(), RawSgemm, shape, f32_copies);
  }
  return true;
}();

}  // namespace
}  // namespace kelvin

KELVIN_BENCHMARK_MAIN()
