// The temperatures' summary on CUDA: two passes over tau (f32) on the device, each leaving one
// partial per block [blocks, 3] that the host finishes; only those partials leave the device.
#include <cmath>
#include <vector>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "ssa/temperature.h"

namespace kelvin::ssa::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 256;

// Pass 1: each block's sum, min and max of x. Pass 2 (`squares`): each block's sum of
// (x - center)^2 in the first slot. partials [blocks, 3] f64.
__global__ void __launch_bounds__(kThreads)
    SummaryPartialsKernel(const float* x, int64_t n, bool squares, double center,
                          double* partials) {
  __shared__ double sums[kThreads], lows[kThreads], highs[kThreads];
  double sum = 0, low = INFINITY, high = -INFINITY;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const double v = x[i];
    sum += squares ? (v - center) * (v - center) : v;
    low = fmin(low, v);
    high = fmax(high, v);
  }
  sums[threadIdx.x] = sum;
  lows[threadIdx.x] = low;
  highs[threadIdx.x] = high;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      sums[threadIdx.x] += sums[threadIdx.x + stride];
      lows[threadIdx.x] = fmin(lows[threadIdx.x], lows[threadIdx.x + stride]);
      highs[threadIdx.x] = fmax(highs[threadIdx.x], highs[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partials[blockIdx.x * 3 + 0] = sums[0];
    partials[blockIdx.x * 3 + 1] = lows[0];
    partials[blockIdx.x * 3 + 2] = highs[0];
  }
}

// One pass's partials, summed (and min / max taken) on the host.
struct Totals {
  double sum = 0, low = INFINITY, high = -INFINITY;
};
Totals RunPass(const Context& ctx, const Tensor& tau, bool squares, double center,
               Tensor& partials) {
  const int64_t n = tau.numel();
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(kMaxBlocks, cuda_utils::CeilDiv(n, kThreads)));
  SummaryPartialsKernel<<<blocks, kThreads, 0, StreamOf(ctx)>>>(tau.data<float>(), n, squares,
                                                                center, partials.data<double>());
  KELVIN_CUDA_CHECK_LAUNCH();
  const Tensor host = CopyToDevice(ctx, partials, Device::Cpu());  // [kMaxBlocks, 3]
  Totals totals;
  for (unsigned b = 0; b < blocks; ++b) {
    const double* row = host.data<double>() + b * 3;
    totals.sum += row[0];
    totals.low = std::fmin(totals.low, row[1]);
    totals.high = std::fmax(totals.high, row[2]);
  }
  return totals;
}

}  // namespace

TemperatureSummary SummarizeTemperatures(const Context& ctx, const Tensor& tau) {
  TemperatureSummary s;
  if (tau.numel() == 0) return s;
  Tensor partials = Tensor::Empty({kMaxBlocks, 3}, DType::kF64, ctx.device());
  const Totals first = RunPass(ctx, tau, /*squares=*/false, 0.0, partials);
  s.count = tau.numel();
  s.mean = first.sum / static_cast<double>(s.count);
  s.min = first.low;
  s.max = first.high;
  s.std = std::sqrt(RunPass(ctx, tau, /*squares=*/true, s.mean, partials).sum /
                    static_cast<double>(s.count));
  return s;
}

}  // namespace kelvin::ssa::cuda
