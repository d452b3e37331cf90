// GPU GEMM throughput of Kelvin's cuBLASLt path (ops::Gemm, bf16 in, f32 accumulate, bf16 out)
// on the shapes torch_matmul.py times with torch.matmul, for the ratio in bench/gpu/run.sh.
// Prints one JSON object per shape: {"m":..,"n":..,"k":..,"ms":..,"tflops":..}.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "bench/gpu/cuda_event_timer.h"
#include "core/context.h"
#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/ops/gemm.h"

namespace kelvin {
namespace {

struct GemmShape {
  int64_t m, n, k;
};

// Device bf16 tensor of pseudo-random values in [-1, 1) (torch_matmul.py uses uniform too).
Tensor RandomDeviceBf16(const Context& ctx, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor host = Tensor::Empty({rows, cols}, DType::kBF16);
  uint32_t state = seed;
  bf16* data = host.data<bf16>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = bf16(static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  return CopyToDevice(ctx, host, ctx.device());
}

// Warm up, then the mean over `iters` back-to-back launches timed by CUDA events.
double TimeGemmMs(const Context& ctx, const GemmShape& s, int iters) {
  // A [M, K], B [N, K] (weights as stored by Linear layers: y = x W^T), C [M, N]; all bf16.
  const Tensor a = RandomDeviceBf16(ctx, s.m, s.k, 1);
  const Tensor b = RandomDeviceBf16(ctx, s.n, s.k, 2);
  Tensor c = Tensor::Empty({s.m, s.n}, DType::kBF16, ctx.device());
  return bench::MeanCudaMs(ctx, 3, iters, [&] { ops::Gemm(ctx, a, false, b, true, c); });
}

}  // namespace
}  // namespace kelvin

int main() {
  using namespace kelvin;
  if (!CudaAvailable()) {
    std::fprintf(stderr, "gemm_gpu_tflops: no CUDA device: %s\n", CudaUnavailableReason().c_str());
    return 1;
  }
  const Context ctx = Context::Cuda(0);
  const std::vector<GemmShape> shapes = {{4096, 4096, 4096}, {8192, 4096, 14336}};
  for (const GemmShape& s : shapes) {
    const double ms = TimeGemmMs(ctx, s, 50);
    const double tflops = 2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12;
    std::printf("{\"m\": %ld, \"n\": %ld, \"k\": %ld, \"ms\": %.4f, \"tflops\": %.1f}\n", s.m, s.n,
                s.k, ms, tflops);
  }
  return 0;
}
