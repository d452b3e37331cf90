// Device helpers and internal launchers shared by the fused SSA attention CUDA kernels
// (ssa_attention.cu) and their temperature kernels (ssa_temperature.cu): bf16 tensor-core MMA
// through inline PTX, bf16 packing, the exact GeLU, and the lane layout of one warp over one
// (token, head) vector of d elements. N tokens, K heads of one side (H query or G kv heads).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"
#include "ssa/ssa_options.h"

namespace kelvin::ssa::cuda_internal {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// D (16x8, f32) += A (16x16, bf16, row-major) * B (16x8, bf16, column-major), one warp.
// Lane = 4 * group + quad (group 0..7, quad 0..3). Fragments (two bf16 per register, the lower
// column/row index in the low half):
//   a[0] = A[group][2q, 2q+1]    a[1] = A[group+8][2q, 2q+1]
//   a[2] = A[group][2q+8, 2q+9]  a[3] = A[group+8][2q+8, 2q+9]
//   b0 = B[2q, 2q+1][group]      b1 = B[2q+8, 2q+9][group]
//   c[0], c[1] = C[group][2q, 2q+1]    c[2], c[3] = C[group+8][2q, 2q+1]
__device__ __forceinline__ void MmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to bf16 (nearest even) in one register: lo in the low half.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

__device__ __forceinline__ float Bf16Low(uint32_t packed) { return __uint_as_float(packed << 16); }
__device__ __forceinline__ float Bf16High(uint32_t packed) {
  return __uint_as_float(packed & 0xffff0000u);
}
__device__ __forceinline__ float Bf16ToFloat(bf16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}

// Two consecutive bf16 of shared memory (an even element index) as one MMA register.
__device__ __forceinline__ uint32_t LoadPair(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Four 8x8 bf16 matrices of shared memory, transposed: lane l gives the address of row l % 8 of
// matrix l / 8 (16 bytes, 16-byte aligned) and receives, of each matrix m, r[m] = the elements
// [2q][group] and [2q+1][group] (the low half the first): with rows = the k index of an MMA's B,
// r[m] is a b0 / b1 fragment.
__device__ __forceinline__ void LoadMatricesTransposed(const bf16* row, uint32_t (&r)[4]) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// 16 bytes from global to shared memory without passing through registers (cp.async, cached in
// L2 only); `valid` false writes 16 zero bytes instead (src is not read). Completes at
// CopyAsyncWait of its group.
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, bool valid) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(address), "l"(src), "r"(valid ? 16 : 0));
}
// Closes the group of the cp.asyncs this thread issued since the last commit.
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// 8 consecutive bf16 (16-byte aligned) <-> 8 floats.
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&v)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = Bf16Low(words[i]);
    v[2 * i + 1] = Bf16High(words[i]);
  }
}
__device__ __forceinline__ uint4 Pack8(const float (&v)[8]) {
  return make_uint4(PackBf16x2(v[0], v[1]), PackBf16x2(v[2], v[3]), PackBf16x2(v[4], v[5]),
                    PackBf16x2(v[6], v[7]));
}

// Exact (erf) GeLU and its derivative Phi(x) + x phi(x), in f32.
__device__ __forceinline__ float Gelu(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
__device__ __forceinline__ float GeluDerivative(float x) {
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}
__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// cos and sin of the RoPE angle position * inv_freq (f32, as ops::RopeForward and Hugging Face
// compute it), reduced to [-pi, pi] with a two-part 2 pi and then taken by the SFU (absolute error
// about 1e-6 there, far below bf16's): sincosf's cost would dominate the K tile loads. Both are
// multiplied by the scaling's attention factor (ops::RopeAttentionFactor; 1 without yarn or
// longrope), as transformers scales cos and sin. Every SSA kernel rotates through this one
// function, so forward and backward agree bit for bit.
__device__ __forceinline__ void RopeSinCos(float position, float inv_freq, float attention_factor,
                                           float* sin_angle, float* cos_angle) {
  const float angle = position * inv_freq;
  const float turns = rintf(angle * 0.15915494309189535f);    // angle / 2 pi
  float reduced = fmaf(-turns, 6.28318548202514648f, angle);  // float(2 pi)
  reduced = fmaf(-turns, -1.7484555314695172e-7f, reduced);   // 2 pi - float(2 pi)
  __sincosf(reduced, sin_angle, cos_angle);
  *sin_angle *= attention_factor;
  *cos_angle *= attention_factor;
}

// One warp over one d-vector: lane handles the RoPE pairs (i, i + d/2) for i = lane + 32 j,
// j < d/64 (d = 64: one pair, d = 128: two). Every kernel that reduces over a vector uses this
// layout and order, so the temperature backward recomputes z bit for bit as the forward did.
template <int kD>
struct LanePairs {
  static constexpr int kPairs = kD / 64;
  static __device__ __forceinline__ int First(int lane, int j) { return lane + 32 * j; }
  static __device__ __forceinline__ int Second(int lane, int j) { return lane + 32 * j + kD / 2; }
};

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// z = a . GeLU(source) over one (token, head) vector, reduced over the warp (every lane gets it).
template <int kD>
__device__ __forceinline__ float ReadoutDot(const bf16* source, const bf16* readout, int lane) {
  float partial = 0.0f;
  for (int j = 0; j < LanePairs<kD>::kPairs; ++j) {
    const int e0 = LanePairs<kD>::First(lane, j), e1 = LanePairs<kD>::Second(lane, j);
    partial += Bf16ToFloat(readout[e0]) * Gelu(Bf16ToFloat(source[e0]));
    partial += Bf16ToFloat(readout[e1]) * Gelu(Bf16ToFloat(source[e1]));
  }
  return WarpSum(partial);
}

// Which terms one temperature has (SsaOptions), as the kernels see them.
struct TemperatureTerms {
  bool active = false;    // off: exactly 1, nothing computed, no gradient
  bool token = false;     // tanh(a . GeLU(source))
  bool position = false;  // sigma(alpha) ln(p + 1) (query side only)
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
};
TemperatureTerms QueryTerms(const SsaOptions& options);
TemperatureTerms ValueTerms(const SsaOptions& options);

// The unclamped temperature tanh(z) + 1 + slope ln(p + 1), in the one order forward and backward
// both use.
__device__ __forceinline__ float UnclampedTemperature(float tanh_z, float slope, float log_n) {
  return tanh_z + 1.0f + slope * log_n;
}

// tau [N, K] f32 of one side: source [N, K, d], readout [K, d], alpha [K] (null without the
// position term), positions [N] (null without it).
void LaunchTemperatureForward(cudaStream_t stream, int d, const TemperatureTerms& terms,
                              const bf16* source, const bf16* readout, const bf16* alpha,
                              const int32_t* positions, int64_t tokens, int heads, float* tau);

// Everything after the attention backward for one side, per (token, head): x~ = tau R(x) with R
// RoPE (or the identity) and tau the temperature (or 1), given dL/dx~:
//   dx += R^T(tau dx~);  dtau = R(x) . dx~, masked by the clamp: dtau';
//   dz = dtau' (1 - tanh(z)^2) (z recomputed); dsource += dz a (*) GeLU'(source);
//   dz and dtau' ln n saved for the parameter gradients (LaunchParameterGrads).
// With weight sharing dsource == dx and both terms go in with one bf16 read-modify-write.
struct TokenBackwardArgs {
  int64_t tokens = 0;  // N
  int heads = 0;       // K
  // [N, K, d] dL/dx~, exactly one of: f32 (the own kernel's) or bf16 (the cuDNN core's).
  const float* grad_tilde = nullptr;
  const bf16* grad_tilde_bf16 = nullptr;
  const bf16* x = nullptr;             // [N, K, d]
  const int32_t* positions = nullptr;  // [N] (RoPE angles and ln n)
  const float* inv_freq = nullptr;     // [d/2]; null: no RoPE on this side
  float rope_attention_factor = 1.0f;  // multiplies RoPE's cos and sin (RopeSinCos)
  const float* tau = nullptr;          // [N, K]; null: the temperature is off
  TemperatureTerms terms;
  const bf16* source = nullptr;   // [N, K, d] the temperature source (x itself with sharing)
  const bf16* readout = nullptr;  // [K, d]
  const bf16* alpha = nullptr;    // [K]; null without the position term
  bf16* dx = nullptr;             // [N, K, d] +=
  bf16* dsource = nullptr;        // [N, K, d] += (== dx with weight sharing)
  float* dz = nullptr;            // [N, K] written when the token term is on
  float* dposition = nullptr;     // [N, K] written when the position term is on: dtau' ln n
};
void LaunchTokenBackward(cudaStream_t stream, int d, const TokenBackwardArgs& args);

// dreadout [K, d] += sum_t dz GeLU(source); dalpha [K] += sigma'(alpha) sum_t dposition
// (f32 atomics over token chunks; dalpha/alpha/dposition null without the position term).
void LaunchParameterGrads(cudaStream_t stream, int d, const TemperatureTerms& terms,
                          const bf16* source, const float* dz, const bf16* alpha,
                          const float* dposition, int64_t tokens, int heads, float* dreadout,
                          float* dalpha);

// delta [rows] = sum_e dout[r, e] out[r, e] (rows = Nq * H vectors of d), f32.
void LaunchRowDot(cudaStream_t stream, int d, const bf16* dout, const bf16* out, int64_t rows,
                  float* delta);

}  // namespace kelvin::ssa::cuda_internal
