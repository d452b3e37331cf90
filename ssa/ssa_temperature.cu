// The SSA temperatures on CUDA (the GPU side of ssa/temperature.cc's math, f32): the forward
// pre-pass tau [N, K], the per-(token, head) backward that finishes one side of the attention
// backward (RoPE^T, temperature chain rule, GeLU' path), the parameter-gradient reduction, and the
// dO . O row dot of the FlashAttention-2 backward. One warp per (token, head) vector.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_utils.cuh"
#include "ssa/ssa_attention_kernels.cuh"

namespace kelvin::ssa::cuda_internal {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kVectorThreads = 32 * kWarpsPerBlock;
// Tokens one block of LaunchParameterGrads sums (more when the tokens need > 65535 chunks).
constexpr int64_t kTokensPerChunk = 128;

unsigned VectorBlocks(int64_t vectors) {
  return static_cast<unsigned>(cuda_utils::CeilDiv(vectors, kWarpsPerBlock));
}

// ln(p + 1) of a token, f32 (the same expression in forward and backward).
__device__ __forceinline__ float LogCount(const int32_t* positions, int64_t token) {
  return logf(static_cast<float>(positions[token]) + 1.0f);
}

template <int kD>
__global__ void __launch_bounds__(kVectorThreads)
    TemperatureForwardKernel(TemperatureTerms terms, const bf16* source, const bf16* readout,
                             const bf16* alpha, const int32_t* positions, int64_t tokens, int heads,
                             float* tau) {
  const int64_t vector = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (vector >= tokens * heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t token = vector / heads;
  const int head = static_cast<int>(vector % heads);
  const float tanh_z =
      terms.token ? tanhf(ReadoutDot<kD>(source + vector * kD, readout + head * kD, lane)) : 0.0f;
  float slope = 0.0f, log_n = 0.0f;
  if (terms.position) {
    slope = Sigmoid(Bf16ToFloat(alpha[head]));
    log_n = LogCount(positions, token);
  }
  float value = UnclampedTemperature(tanh_z, slope, log_n);
  if (terms.clamp) value = fminf(fmaxf(value, terms.lo), terms.hi);
  if (lane == 0) tau[vector] = value;
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(bf16 x) { return Bf16ToFloat(x); }

// Grad: the element type of dL/dx~ (f32 or bf16), read from `grad_tilde` [N, K, d].
template <int kD, typename Grad>
__global__ void __launch_bounds__(kVectorThreads)
    TokenBackwardKernel(TokenBackwardArgs a, const Grad* grad_tilde) {
  const int64_t vector = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (vector >= a.tokens * a.heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t token = vector / a.heads;
  const int head = static_cast<int>(vector % a.heads);
  constexpr int kPairs = LanePairs<kD>::kPairs;
  const Grad* g = grad_tilde + vector * kD;  // [d] dL/dx~
  const bf16* x = a.x + vector * kD;         // [d]
  const float position = a.inv_freq != nullptr ? static_cast<float>(a.positions[token]) : 0.0f;
  const float tau = a.tau != nullptr ? a.tau[vector] : 1.0f;

  // The direct term R^T(tau dx~) and the partial dot R(x) . dx~ of this lane's pairs.
  float direct[kPairs][2];
  float dtau_partial = 0.0f;
  for (int j = 0; j < kPairs; ++j) {
    const int e0 = LanePairs<kD>::First(lane, j), e1 = LanePairs<kD>::Second(lane, j);
    const float g0 = ToFloat(g[e0]), g1 = ToFloat(g[e1]);
    float x0 = Bf16ToFloat(x[e0]), x1 = Bf16ToFloat(x[e1]);
    const float t0 = a.tau != nullptr ? tau * g0 : g0, t1 = a.tau != nullptr ? tau * g1 : g1;
    if (a.inv_freq != nullptr) {
      float s, c;
      RopeSinCos(position, a.inv_freq[e0], a.rope_attention_factor, &s, &c);
      const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
      x0 = r0;
      x1 = r1;
      direct[j][0] = t0 * c + t1 * s;
      direct[j][1] = t1 * c - t0 * s;
    } else {
      direct[j][0] = t0;
      direct[j][1] = t1;
    }
    dtau_partial += x0 * g0 + x1 * g1;
  }

  // The temperature chain rule: the same z, tanh and unclamped value as the forward.
  float dz = 0.0f;
  const bf16* source = a.source != nullptr ? a.source + vector * kD : nullptr;   // [d]
  const bf16* readout = a.readout != nullptr ? a.readout + head * kD : nullptr;  // [d]
  if (a.tau != nullptr) {
    const float dtau = WarpSum(dtau_partial);
    const float tanh_z = a.terms.token ? tanhf(ReadoutDot<kD>(source, readout, lane)) : 0.0f;
    float slope = 0.0f, log_n = 0.0f;
    if (a.terms.position) {
      slope = Sigmoid(Bf16ToFloat(a.alpha[head]));
      log_n = LogCount(a.positions, token);
    }
    float dtau_masked = dtau;
    if (a.terms.clamp) {
      const float unclamped = UnclampedTemperature(tanh_z, slope, log_n);
      if (unclamped < a.terms.lo || unclamped > a.terms.hi) dtau_masked = 0.0f;
    }
    dz = dtau_masked * (1.0f - tanh_z * tanh_z);
    if (lane == 0) {
      if (a.terms.token) a.dz[vector] = dz;
      if (a.terms.position) a.dposition[vector] = dtau_masked * log_n;
    }
  }
  const bool source_grad = a.tau != nullptr && a.terms.token;

  bf16* dx = a.dx + vector * kD;
  bf16* dsource = a.dsource != nullptr ? a.dsource + vector * kD : nullptr;
  for (int j = 0; j < kPairs; ++j) {
    const int e[2] = {LanePairs<kD>::First(lane, j), LanePairs<kD>::Second(lane, j)};
    for (int h = 0; h < 2; ++h) {
      const float through_source =
          source_grad ? dz * Bf16ToFloat(readout[e[h]]) * GeluDerivative(Bf16ToFloat(source[e[h]]))
                      : 0.0f;
      if (dsource == dx) {
        dx[e[h]] = bf16(Bf16ToFloat(dx[e[h]]) + direct[j][h] + through_source);
      } else {
        dx[e[h]] = bf16(Bf16ToFloat(dx[e[h]]) + direct[j][h]);
        if (source_grad) dsource[e[h]] = bf16(Bf16ToFloat(dsource[e[h]]) + through_source);
      }
    }
  }
}

// grid (K heads, token chunks); block kD threads, thread e owns readout element e.
template <int kD>
__global__ void __launch_bounds__(kD)
    ParameterGradKernel(TemperatureTerms terms, const bf16* source, const float* dz,
                        const bf16* alpha, const float* dposition, int64_t tokens, int heads,
                        int64_t tokens_per_chunk, float* dreadout, float* dalpha) {
  const int head = blockIdx.x, e = threadIdx.x;
  const int64_t begin = blockIdx.y * tokens_per_chunk;
  const int64_t end = min(tokens, begin + tokens_per_chunk);
  if (terms.token) {
    float sum = 0.0f;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t vector = t * heads + head;
      sum += dz[vector] * Gelu(Bf16ToFloat(source[vector * kD + e]));
    }
    atomicAdd(dreadout + head * kD + e, sum);
  }
  if (terms.position) {  // uniform over the block: BlockReduceSum's barriers are safe
    float sum = 0.0f;
    for (int64_t t = begin + e; t < end; t += kD) sum += dposition[t * heads + head];
    sum = cuda_utils::BlockReduceSum(sum);
    if (e == 0) {
      const float s = Sigmoid(Bf16ToFloat(alpha[head]));
      atomicAdd(dalpha + head, s * (1.0f - s) * sum);
    }
  }
}

template <int kD>
__global__ void __launch_bounds__(kVectorThreads)
    RowDotKernel(const bf16* dout, const bf16* out, int64_t rows, float* delta) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float partial = 0.0f;
  for (int e = lane; e < kD; e += 32) {
    partial += Bf16ToFloat(dout[row * kD + e]) * Bf16ToFloat(out[row * kD + e]);
  }
  partial = WarpSum(partial);
  if (lane == 0) delta[row] = partial;
}

// Calls fn.template operator()<kD>() for the supported head dims.
template <typename Fn>
void DispatchHeadDim(int d, Fn&& fn) {
  if (d == 64) {
    fn.template operator()<64>();
  } else {
    KELVIN_CHECK_EQ(d, 128) << "the SSA CUDA kernels support head dims 64 and 128";
    fn.template operator()<128>();
  }
}

}  // namespace

TemperatureTerms QueryTerms(const SsaOptions& o) {
  TemperatureTerms t;
  t.active = o.query_temperature;
  t.token = o.query_temperature && o.token_aware;
  t.position = o.query_temperature && o.position_aware;
  t.clamp = o.query_temperature && o.temperature_clamp.has_value();
  if (t.clamp) {
    t.lo = static_cast<float>(o.temperature_clamp->lo);
    t.hi = static_cast<float>(o.temperature_clamp->hi);
  }
  return t;
}

TemperatureTerms ValueTerms(const SsaOptions& o) {
  TemperatureTerms t;
  t.active = o.value_temperature;
  t.token = o.value_temperature && o.token_aware;
  t.clamp = o.value_temperature && o.temperature_clamp.has_value();
  if (t.clamp) {
    t.lo = static_cast<float>(o.temperature_clamp->lo);
    t.hi = static_cast<float>(o.temperature_clamp->hi);
  }
  return t;
}

void LaunchTemperatureForward(cudaStream_t stream, int d, const TemperatureTerms& terms,
                              const bf16* source, const bf16* readout, const bf16* alpha,
                              const int32_t* positions, int64_t tokens, int heads, float* tau) {
  if (tokens == 0) return;
  DispatchHeadDim(d, [&]<int kD>() {
    TemperatureForwardKernel<kD><<<VectorBlocks(tokens * heads), kVectorThreads, 0, stream>>>(
        terms, source, readout, alpha, positions, tokens, heads, tau);
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void LaunchTokenBackward(cudaStream_t stream, int d, const TokenBackwardArgs& args) {
  if (args.tokens == 0) return;
  KELVIN_CHECK((args.grad_tilde == nullptr) != (args.grad_tilde_bf16 == nullptr))
      << "LaunchTokenBackward: exactly one of grad_tilde (f32) and grad_tilde_bf16";
  const unsigned blocks = VectorBlocks(args.tokens * args.heads);
  DispatchHeadDim(d, [&]<int kD>() {
    if (args.grad_tilde != nullptr) {
      TokenBackwardKernel<kD><<<blocks, kVectorThreads, 0, stream>>>(args, args.grad_tilde);
    } else {
      TokenBackwardKernel<kD><<<blocks, kVectorThreads, 0, stream>>>(args, args.grad_tilde_bf16);
    }
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void LaunchParameterGrads(cudaStream_t stream, int d, const TemperatureTerms& terms,
                          const bf16* source, const float* dz, const bf16* alpha,
                          const float* dposition, int64_t tokens, int heads, float* dreadout,
                          float* dalpha) {
  if (tokens == 0 || !(terms.token || terms.position)) return;
  const int64_t tokens_per_chunk = cuda_utils::RowsPerGridY(tokens, kTokensPerChunk);
  const dim3 grid(static_cast<unsigned>(heads),
                  static_cast<unsigned>(cuda_utils::CeilDiv(tokens, tokens_per_chunk)));
  DispatchHeadDim(d, [&]<int kD>() {
    ParameterGradKernel<kD><<<grid, kD, 0, stream>>>(terms, source, dz, alpha, dposition, tokens,
                                                     heads, tokens_per_chunk, dreadout, dalpha);
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

void LaunchRowDot(cudaStream_t stream, int d, const bf16* dout, const bf16* out, int64_t rows,
                  float* delta) {
  if (rows == 0) return;
  DispatchHeadDim(d, [&]<int kD>() {
    RowDotKernel<kD><<<VectorBlocks(rows), kVectorThreads, 0, stream>>>(dout, out, rows, delta);
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kelvin::ssa::cuda_internal
