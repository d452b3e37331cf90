// GPU throughput of the SSA attention operator on each attention core (Kelvin's fused kernel,
// the cuDNN core) with every temperature on ("ssa") and off ("vanilla", VanillaAttentionOptions):
// bf16, causal, GQA H = 32, G = 8, d = 128, batch x tokens = 16K, for T = 1K..16K and a packed
// case (rows of 8K tokens holding documents of 1K, whose positions restart), for the ratios against
// torch SDPA (torch_sdpa.py) in bench/gpu/run.sh. FLOPs as FlashAttention reports them: causal
// forward 4 B H T^2 d / 2 per document, backward 2.5 x forward. Prints one JSON object per (core,
// mode, shape), or per core it cannot run with the reason.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/gpu/cuda_event_timer.h"
#include "core/context.h"
#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/ops/rope.h"
#include "ssa/ssa_attention.h"

namespace kelvin {
namespace {

constexpr int64_t kTokens = 16384;  // batch x tokens per step
constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int kWarmup = 3, kIters = 10;

// Device bf16 tensor of pseudo-random values in [lo, hi).
Tensor RandomDeviceBf16(const Context& ctx, const Shape& shape, uint32_t seed, float lo, float hi) {
  Tensor host = Tensor::Empty(shape, DType::kBF16);
  uint32_t state = seed;
  bf16* data = host.data<bf16>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = bf16(lo + (hi - lo) * static_cast<float>(state >> 8) / 16777216.0f);
  }
  return CopyToDevice(ctx, host, ctx.device());
}

Tensor DeviceZeros(const Context& ctx, const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, ctx.device());
  Zero(ctx, t);
  return t;
}

// Mean milliseconds of `fn` over kIters launches after kWarmup, timed by CUDA events.
double TimeMs(const Context& ctx, const std::function<void()>& fn) {
  return bench::MeanCudaMs(ctx, kWarmup, kIters, fn);
}

// One benchmark shape: rows of `seq` tokens made of documents of `document` tokens each.
struct Case {
  int64_t seq, document;
};

void Run(const Context& ctx, ssa::AttentionBackend backend, const std::string& mode,
         const ssa::SsaOptions& options, const Case& c) {
  const int64_t batch = kTokens / c.seq, n = kTokens;
  const int64_t h = kHeads, g = kKvHeads, d = kHeadDim;
  ssa::SsaAttentionInputs in;
  in.u = RandomDeviceBf16(ctx, {n, h, d}, 1, -2, 2);   // [N, H, d]
  in.k = RandomDeviceBf16(ctx, {n, g, d}, 2, -2, 2);   // [N, G, d]
  in.v = RandomDeviceBf16(ctx, {n, g, d}, 3, -1, 1);   // [N, G, d]
  Tensor positions = Tensor::Empty({n}, DType::kI32);  // [N]: 0..document-1 repeated
  for (int64_t t = 0; t < n; ++t) {
    positions.data<int32_t>()[t] = static_cast<int32_t>(t % c.seq % c.document);
  }
  in.query_positions = CopyToDevice(ctx, positions, ctx.device());
  in.inv_freq = CopyToDevice(ctx, ops::RopeInverseFrequencies(ops::RopeConfig{}, d, DType::kF32),
                             ctx.device());
  ssa::SsaParameters params;
  params.query_readout = RandomDeviceBf16(ctx, {h, d}, 4, -0.05f, 0.05f);  // [H, d]
  params.value_readout = RandomDeviceBf16(ctx, {g, d}, 5, -0.05f, 0.05f);  // [G, d]
  params.alpha = RandomDeviceBf16(ctx, {h}, 6, -8.5f, -7.5f);              // [H]
  ssa::SsaAttentionOutputs out{
      DeviceZeros(ctx, {n, h, d}, DType::kBF16), DeviceZeros(ctx, {n, h}, DType::kF32),
      DeviceZeros(ctx, {n, h}, DType::kF32), DeviceZeros(ctx, {n, g}, DType::kF32)};
  const Tensor dout = RandomDeviceBf16(ctx, {n, h, d}, 7, -1, 1);  // [N, H, d]
  ssa::SsaAttentionGrads grads;
  grads.du = DeviceZeros(ctx, {n, h, d}, DType::kBF16);
  grads.dk = DeviceZeros(ctx, {n, g, d}, DType::kBF16);
  grads.dv = DeviceZeros(ctx, {n, g, d}, DType::kBF16);
  grads.params = {DeviceZeros(ctx, {h, d}, DType::kF32), DeviceZeros(ctx, {g, d}, DType::kF32),
                  DeviceZeros(ctx, {h}, DType::kF32)};
  const ssa::SsaBlockShape shape = ssa::SsaBlockShape::Full(batch, c.seq);
  ssa::AttentionCore forward_core = ssa::AttentionCore::kFused;
  ssa::AttentionCore backward_core = ssa::AttentionCore::kFused;
  ssa::AttentionCoreOptions forward{backend, positions, Tensor(), &forward_core};
  ssa::AttentionCoreOptions backward{backend, positions, Tensor(), &backward_core};

  const double fwd_ms =
      TimeMs(ctx, [&] { ssa::SsaAttentionForward(ctx, options, shape, in, params, out, forward); });
  const double bwd_ms = TimeMs(ctx, [&] {
    ssa::SsaAttentionBackward(ctx, options, shape, dout, in, params, out, grads, backward);
  });
  const double documents = static_cast<double>(n / c.document);
  const double fwd_flops =
      4.0 * documents * h * static_cast<double>(c.document) * c.document * d / 2;
  const double bwd_flops = 2.5 * fwd_flops;
  auto tflops = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
  std::printf(
      "{\"impl\": \"kelvin_%s_%s\", \"core_run\": \"%s/%s\", \"batch\": %ld, \"seq\": %ld, "
      "\"document\": %ld, \"heads\": %ld, \"kv_heads\": %ld, \"head_dim\": %ld, \"fwd_ms\": %.3f, "
      "\"bwd_ms\": %.3f, \"fwd_tflops\": %.1f, \"bwd_tflops\": %.1f, \"fwd_bwd_tflops\": %.1f}\n",
      backend == ssa::AttentionBackend::kCudnn ? "cudnn" : "fused", mode.c_str(),
      std::string(ssa::AttentionCoreName(forward_core)).c_str(),
      std::string(ssa::AttentionCoreName(backward_core)).c_str(), batch, c.seq, c.document, h, g, d,
      fwd_ms, bwd_ms, tflops(fwd_flops, fwd_ms), tflops(bwd_flops, bwd_ms),
      tflops(fwd_flops + bwd_flops, fwd_ms + bwd_ms));
  std::fflush(stdout);
}

}  // namespace
}  // namespace kelvin

int main() {
  using namespace kelvin;
  if (!CudaAvailable()) {
    std::fprintf(stderr, "ssa_attention_gpu: no CUDA device: %s\n",
                 CudaUnavailableReason().c_str());
    return 1;
  }
  const Context ctx = Context::Cuda(0);
  const std::vector<Case> cases = {{1024, 1024}, {2048, 2048},   {4096, 4096},
                                   {8192, 8192}, {16384, 16384}, {8192, 1024}};
  const std::string cudnn_unavailable = ssa::CudnnCoreUnavailableReason(ctx);
  for (const ssa::AttentionBackend backend :
       {ssa::AttentionBackend::kFused, ssa::AttentionBackend::kCudnn}) {
    if (backend == ssa::AttentionBackend::kCudnn && !cudnn_unavailable.empty()) {
      std::printf("{\"impl\": \"kelvin_cudnn\", \"skipped\": \"%s\"}\n", cudnn_unavailable.c_str());
      continue;
    }
    for (const Case& c : cases) {
      Run(ctx, backend, "ssa", ssa::SsaOptions{}, c);
      Run(ctx, backend, "vanilla", ssa::VanillaAttentionOptions(), c);
    }
  }
  return 0;
}
