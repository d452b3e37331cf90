// Timing GPU work for the bench/gpu programs: the mean milliseconds of one launch of `fn` on the
// context's stream, measured by CUDA events over `iters` launches after `warmup` untimed ones.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "core/context.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace kelvin::bench {

inline double MeanCudaMs(const Context& ctx, int warmup, int iters,
                         const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  KELVIN_CUDA_CHECK(cudaEventCreate(&start));
  KELVIN_CUDA_CHECK(cudaEventCreate(&stop));
  KELVIN_CUDA_CHECK(cudaEventRecord(start, StreamOf(ctx)));
  for (int i = 0; i < iters; ++i) fn();
  KELVIN_CUDA_CHECK(cudaEventRecord(stop, StreamOf(ctx)));
  KELVIN_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  KELVIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  KELVIN_CUDA_CHECK(cudaEventDestroy(start));
  KELVIN_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / iters;
}

}  // namespace kelvin::bench
