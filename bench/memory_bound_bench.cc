// Memory-bound ops on the CPU in f32 against memcpy moving the same bytes: RMSNorm forward, SwiGLU
// forward, Add, Cast f32 -> bf16 and RoPE forward, each over N x D = 8192 x 4096 f32 (128 MiB per
// operand, far above the caches). Goal: each op at >= 0.5x memcpy's bandwidth. Rates are bytes
// read + bytes written per second.
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/ratio_reporter.h"
#include "core/context.h"
#include "core/ops/elementwise.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "core/tensor.h"

namespace kelvin {
namespace {

constexpr int64_t kRows = 8192, kCols = 4096;              // N, D
constexpr int64_t kHeads = 32, kHeadDim = kCols / kHeads;  // RoPE: H, d (Llama-3-8B)
constexpr int64_t kF32Bytes = kRows * kCols * 4;           // one [N, D] f32 operand
const std::string kCase = std::to_string(kRows) + "x" + std::to_string(kCols);

const Context& Cpu() {
  static const Context ctx = Context::Cpu();
  return ctx;
}

// An [N, D]-sized tensor of `shape`, filled (so its pages are mapped before timing).
Tensor Filled(const Shape& shape, DType dtype, double value) {
  Tensor t = Tensor::Empty(shape, dtype);
  ops::Fill(Cpu(), t, value);
  return t;
}

// One memory-bound op: the bytes it reads and writes per call, and a factory that allocates its
// tensors and returns the call to time.
struct MemoryBoundOp {
  std::string name;
  int64_t bytes_moved;
  std::function<std::function<void()>()> prepare;
};

std::vector<MemoryBoundOp> Ops() {
  return {
      {"rmsnorm_forward", 2 * kF32Bytes + kCols * 4 + kRows * 4,  // x, weight; y, rstd
       [] {
         Tensor x = Filled({kRows, kCols}, DType::kF32, 0.5);  // [N, D]
         Tensor w = Filled({kCols}, DType::kF32, 1.0);         // [D]
         Tensor y = Filled({kRows, kCols}, DType::kF32, 0);    // [N, D]
         Tensor rstd = Filled({kRows}, DType::kF32, 0);        // [N]
         return [=]() mutable { ops::RmsNormForward(Cpu(), x, w, 1e-5, y, rstd); };
       }},
      {"swiglu_forward", 3 * kF32Bytes,  // gate, up; out
       [] {
         Tensor gate = Filled({kRows, kCols}, DType::kF32, 0.5);  // [N, F]
         Tensor up = Filled({kRows, kCols}, DType::kF32, 2.0);    // [N, F]
         Tensor out = Filled({kRows, kCols}, DType::kF32, 0);     // [N, F]
         return [=]() mutable { ops::SwiGluForward(Cpu(), gate, up, out); };
       }},
      {"add", 3 * kF32Bytes,  // a, b; out
       [] {
         Tensor a = Filled({kRows, kCols}, DType::kF32, 1.0);  // [N, D]
         Tensor b = Filled({kRows, kCols}, DType::kF32, 2.0);  // [N, D]
         Tensor out = Filled({kRows, kCols}, DType::kF32, 0);  // [N, D]
         return [=]() mutable { ops::Add(Cpu(), a, b, out); };
       }},
      {"cast_f32_bf16", kF32Bytes + kF32Bytes / 2,  // x; out (half the bytes)
       [] {
         Tensor x = Filled({kRows, kCols}, DType::kF32, 1.2345);  // [N, D]
         Tensor out = Filled({kRows, kCols}, DType::kBF16, 0);    // [N, D]
         return [=]() mutable { ops::Cast(Cpu(), x, out); };
       }},
      {"rope_forward", 2 * kF32Bytes + kRows * 4 + kHeadDim / 2 * 4,  // x, positions, inv_freq; y
       [] {
         Tensor x = Filled({kRows, kHeads, kHeadDim}, DType::kF32, 0.5);  // [N, H, d]
         Tensor y = Filled({kRows, kHeads, kHeadDim}, DType::kF32, 0);    // [N, H, d]
         Tensor positions = Tensor::Empty({kRows}, DType::kI32);          // [N]: 0..N-1
         for (int64_t i = 0; i < kRows; ++i) positions.data<int32_t>()[i] = static_cast<int32_t>(i);
         ops::RopeConfig config;
         config.type = ops::RopeType::kLlama3;
         Tensor inv_freq = ops::RopeInverseFrequencies(config, kHeadDim, DType::kF32);  // [d/2]
         return [=]() mutable { ops::RopeForward(Cpu(), x, positions, inv_freq, y); };
       }},
  };
}

void RunOp(::benchmark::State& state, const MemoryBoundOp& op) {
  std::function<void()> call = op.prepare();
  call();  // warm-up: first-touch effects and OpenMP thread start-up stay out of the timing
  for (auto _ : state) call();
  state.SetBytesProcessed(state.iterations() * op.bytes_moved);
}

// memcpy of bytes_moved / 2 bytes, one contiguous chunk per OpenMP thread (the ops use every
// thread). The baseline "<op>/memcpy/<case>" copies S = (read + written) / 2 bytes per iteration
// (memcpy of S bytes reads S and writes S, so it moves the op's traffic) and reports 2 S: the two
// GB/s figures compare like for like.
void RunMemcpy(::benchmark::State& state, int64_t bytes_moved) {
  const size_t size = static_cast<size_t>(bytes_moved / 2);
  std::vector<char> src(size, 1), dst(size, 0);
  const auto copy = [&] {
#pragma omp parallel
    {
      const size_t threads = static_cast<size_t>(omp_get_num_threads());
      const size_t thread = static_cast<size_t>(omp_get_thread_num());
      const size_t begin = size * thread / threads, end = size * (thread + 1) / threads;
      std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
    }
  };
  copy();
  for (auto _ : state) {
    copy();
    ::benchmark::DoNotOptimize(dst.data());
    ::benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(size));
}

// Each op right before its baseline, both timed over kMinSeconds of wall time (the machine's cores
// are shared, so short runs would mostly measure the neighbours).
constexpr double kMinSeconds = 2.0;
const bool kRegistered = [] {
  for (const MemoryBoundOp& op : Ops()) {
    ::benchmark::RegisterBenchmark((op.name + "/kelvin/" + kCase).c_str(), RunOp, op)
        ->UseRealTime()
        ->MinTime(kMinSeconds)
        ->Unit(::benchmark::kMillisecond);
    ::benchmark::RegisterBenchmark((op.name + "/memcpy/" + kCase).c_str(), RunMemcpy,
                                   op.bytes_moved)
        ->UseRealTime()
        ->MinTime(kMinSeconds)
        ->Unit(::benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace kelvin

KELVIN_BENCHMARK_MAIN()
