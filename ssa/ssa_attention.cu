// The SSA attention operator on CUDA (bf16 storage, f32 accumulation): the RoPE/temperature pass
// writing q~, k~, v~, the attention core (Kelvin's own FlashAttention-2 kernels on sm_90 tensor
// cores through mma.sync m16n8k16, or the cuDNN core of cudnn_attention.cc, chosen per call), the
// adjoint pass, and the log-sum-exp merge of key blocks. B rows, Tq / Tk query / key tokens per
// row, H query heads, G kv heads, d head dim (64 or 128). Temperatures: ssa_temperature.cu.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/logging.h"
#include "ssa/attention_segments.h"
#include "ssa/ssa_attention.h"
#include "ssa/ssa_attention_kernels.cuh"
#if KELVIN_WITH_CUDNN
#include "ssa/cudnn_attention.h"
#endif

namespace kelvin::ssa {
namespace cuda_internal {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kForwardQueries = 64;   // query rows per forward CTA (16 per warp)
constexpr int kKeys = 64;             // keys per tile (forward) and per backward CTA
constexpr int kBackwardQueries = 32;  // query rows per backward inner tile
constexpr int kPad = 8;  // bf16 of padding per shared row: conflict-free 32-bit fragment loads

// What both attention kernels read. Token t of a side is row * T + local index; its vectors sit
// at (t * heads + head) * d.
struct AttentionParams {
  const bf16* q;                   // [Nq, H, d] q~ = tau^q R(u)
  const bf16* k;                   // [Nk, G, d] k~ = R(k)
  const bf16* v;                   // [Nk, G, d] v~ = tau^v v
  const int32_t* query_positions;  // [Nq]
  const int32_t* key_positions;    // [Nk]
  int query_begin, query_count;    // global index of each row's first query, Tq
  int key_begin, key_count;        // global index of each row's first key, Tk
  int heads, kv_heads;             // H, G
  float scale_log2;                // log2(e) / sqrt(d): scores in log2 units
};

// grid (ceil(vectors * d/16 / 256)), 256 threads; thread: one 8-element chunk of the first half
// of a (token, head) vector and its RoPE partners d/2 later. out = bf16(scale * R(x)) where R is
// RoPE at the token's position (when positions is not null; cos and sin times rope_factor, the
// scaling's attention factor) and scale = tau of the vector (1 when tau is null). x, out
// [N, heads, d]; positions [N]; tau [N, heads].
template <int kD>
__global__ void __launch_bounds__(256)
    PrepareKernel(const bf16* x, const int32_t* positions, const float* inv_freq, float rope_factor,
                  const float* tau, int64_t vectors, int heads, bf16* out) {
  constexpr int kChunks = kD / 16;  // 8-element chunks in half a vector
  const int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (item >= vectors * kChunks) return;
  const int64_t vector = item / kChunks;
  const int c = static_cast<int>(item % kChunks) * 8;
  const bf16* row = x + vector * kD;
  float a[8], b[8];  // elements c..c+7 and their RoPE partners c+d/2..c+d/2+7
  Unpack8(*reinterpret_cast<const uint4*>(row + c), a);
  Unpack8(*reinterpret_cast<const uint4*>(row + c + kD / 2), b);
  if (positions != nullptr) {
    const float position = static_cast<float>(positions[vector / heads]);
    for (int j = 0; j < 8; ++j) {
      float sn, cs;
      RopeSinCos(position, inv_freq[c + j], rope_factor, &sn, &cs);
      const float ra = a[j] * cs - b[j] * sn, rb = b[j] * cs + a[j] * sn;
      a[j] = ra;
      b[j] = rb;
    }
  }
  if (tau != nullptr) {
    const float scale = tau[vector];
    for (int j = 0; j < 8; ++j) {
      a[j] *= scale;
      b[j] *= scale;
    }
  }
  *reinterpret_cast<uint4*>(out + vector * kD + c) = Pack8(a);
  *reinterpret_cast<uint4*>(out + vector * kD + c + kD / 2) = Pack8(b);
}

// rows x kD tile of shared memory (rows kD + kPad apart) from rows x_stride elements apart;
// rows at or past `valid` are zeros.
template <int kD, int kRows>
__device__ void LoadTile(bf16* dst, const bf16* x, int64_t x_stride, int valid) {
  constexpr int kChunks = kD / 8;
  constexpr int kStride = kD + kPad;
  for (int item = threadIdx.x; item < kRows * kChunks; item += kThreads) {
    const int r = item / kChunks, c = (item % kChunks) * 8;
    const uint4 chunk =
        r < valid ? *reinterpret_cast<const uint4*>(x + r * x_stride + c) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst + r * kStride + c) = chunk;
  }
}

// As LoadTile, by cp.async (the caller commits and waits).
template <int kD, int kRows>
__device__ void LoadTileAsync(bf16* dst, const bf16* x, int64_t x_stride, int valid) {
  constexpr int kChunks = kD / 8;
  for (int item = threadIdx.x; item < kRows * kChunks; item += kThreads) {
    const int r = item / kChunks, c = (item % kChunks) * 8;
    const bool in = r < valid;
    CopyAsync16(dst + r * (kD + kPad) + c, in ? x + r * x_stride + c : x, in);
  }
}

// dst [kD][kRows + kPad] = src [kRows][kD + kPad] transposed (shared memory to shared memory).
template <int kD, int kRows>
__device__ void TransposeTile(const bf16* src, bf16* dst) {
  for (int item = threadIdx.x; item < kRows * kD; item += kThreads) {
    const int r = item % kRows, e = item / kRows;
    dst[e * (kRows + kPad) + r] = src[r * (kD + kPad) + e];
  }
}

// The A fragment of rows [row0, row0 + 16) and columns [col0, col0 + 16) of a row-major bf16
// shared tile with `stride` elements per row.
__device__ __forceinline__ void LoadA(const bf16* tile, int stride, int row0, int col0, int group,
                                      int quad, uint32_t (&a)[4]) {
  const bf16* top = tile + (row0 + group) * stride + col0 + 2 * quad;
  const bf16* bottom = top + 8 * stride;
  a[0] = LoadPair(top);
  a[1] = LoadPair(bottom);
  a[2] = LoadPair(top + 8);
  a[3] = LoadPair(bottom + 8);
}

// The B fragment (k = 16 x n = 8) whose column n is row n0 + n of a row-major shared tile `rows`
// (B[k][n] = rows[n0 + n][k0 + k]).
__device__ __forceinline__ void LoadB(const bf16* rows, int stride, int n0, int k0, int group,
                                      int quad, uint32_t& b0, uint32_t& b1) {
  const bf16* p = rows + (n0 + group) * stride + k0 + 2 * quad;
  b0 = LoadPair(p);
  b1 = LoadPair(p + 8);
}

// Accumulator fragments of two adjacent 8-column tiles as the A fragment of a 16-deep product
// (the FlashAttention-2 register reuse of P): columns 16 kk .. 16 kk + 15.
__device__ __forceinline__ void AccumulatorsAsA(const float (&left)[4], const float (&right)[4],
                                                uint32_t (&a)[4]) {
  a[0] = PackBf16x2(left[0], left[1]);
  a[1] = PackBf16x2(left[2], left[3]);
  a[2] = PackBf16x2(right[0], right[1]);
  a[3] = PackBf16x2(right[2], right[3]);
}

// Query i sees key j iff i - p_i <= j <= i (global indices); i = -1 marks a row past the end.
__device__ __forceinline__ bool Visible(int i, int document_start, int j) {
  return j <= i && j >= document_start;
}

template <int kD>
struct ForwardSmem {
  bf16 q[kForwardQueries][kD + kPad];  // q~ = tau^q RoPE(u)
  bf16 k[2][kKeys][kD + kPad];         // k~ = RoPE(k): the tile in use and the next one
  bf16 v[2][kKeys][kD + kPad];         // v~ = tau^v v, likewise
};

// grid (query tiles, H, B), kThreads threads: one CTA per 64 queries of one head of one row, the
// query tile reversed so the longest causal rows start first. Warp w owns query rows 16w..16w+15.
// The next key tile's k~ and v~ are copied (cp.async) while the current one is used.
// Position ids restart at 0 or count up by one within a row (the dispatcher's contract), so the
// document start i - p_i is non-decreasing in i and a tile's visible keys are
// [start of its first query's document, its last query].
template <int kD>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(AttentionParams p, bf16* out, float* lse) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  ForwardSmem<kD>& s = *reinterpret_cast<ForwardSmem<kD>*>(smem_bytes);
  const int q_tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = blockIdx.y, row = blockIdx.z;
  const int kv_head = head / (p.heads / p.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const int a0 = q_tile * kForwardQueries;
  const int q_valid = min(kForwardQueries, p.query_count - a0);
  const int64_t q_token0 = static_cast<int64_t>(row) * p.query_count + a0;
  const int64_t k_token0 = static_cast<int64_t>(row) * p.key_count;

  LoadTile<kD, kForwardQueries>(&s.q[0][0], p.q + (q_token0 * p.heads + head) * kD,
                                static_cast<int64_t>(p.heads) * kD, q_valid);

  // This thread's two query rows (index 0: row 16w + group, 1: row 16w + group + 8).
  int query_index[2], document_start[2];
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + group + 8 * h;
    const bool valid = r < q_valid;
    query_index[h] = valid ? p.query_begin + a0 + r : -1;
    document_start[h] = valid ? query_index[h] - p.query_positions[q_token0 + r] : 0;
  }
  const int first_i = p.query_begin + a0, last_i = first_i + q_valid - 1;
  const int first_start = first_i - p.query_positions[q_token0];
  const int last_start = last_i - p.query_positions[q_token0 + q_valid - 1];
  const int b_begin = max(0, first_start - p.key_begin);         // local key indices [b_begin,
  const int b_end = min(p.key_count, last_i - p.key_begin + 1);  // b_end) are visible to some row
  const int tile_begin = b_begin / kKeys;
  const int tile_end = b_end > b_begin ? (b_end + kKeys - 1) / kKeys : tile_begin;
  __syncthreads();

  uint32_t qa[kD / 16][4];  // this warp's 16 rows of q~ as A fragments
  for (int ks = 0; ks < kD / 16; ++ks) {
    LoadA(&s.q[0][0], kD + kPad, warp * 16, ks * 16, group, quad, qa[ks]);
  }
  float o[kD / 8][4];  // unnormalised output, rows as in the C fragment layout
  for (int n = 0; n < kD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 units
  float row_sum[2] = {0.0f, 0.0f};            // this thread's share of sum 2^(x - max)

  auto fetch = [&](int tile, int buffer) {  // k~, v~ of key tile `tile` into `buffer`
    const int b0 = tile * kKeys;
    const int64_t vector0 = (k_token0 + b0) * p.kv_heads + kv_head;
    const int k_valid = min(kKeys, p.key_count - b0);
    const int64_t stride = static_cast<int64_t>(p.kv_heads) * kD;
    LoadTileAsync<kD, kKeys>(&s.k[buffer][0][0], p.k + vector0 * kD, stride, k_valid);
    LoadTileAsync<kD, kKeys>(&s.v[buffer][0][0], p.v + vector0 * kD, stride, k_valid);
    CopyAsyncCommit();
  };
  if (tile_begin < tile_end) fetch(tile_begin, 0);

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int b0 = tile * kKeys;
    const int k_valid = min(kKeys, p.key_count - b0);
    const int buffer = (tile - tile_begin) & 1;
    if (tile + 1 < tile_end) {
      fetch(tile + 1, buffer ^ 1);  // its buffer was last read before the previous barrier
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    // This tile's copies, from every thread, have landed.
    __syncthreads();
    const bf16* k_tile = &s.k[buffer][0][0];  // [kKeys][kD + kPad]
    const bf16* v_tile = &s.v[buffer][0][0];  // [kKeys][kD + kPad]

    // S = q~ k~^T for 16 rows x 64 keys (8 tiles of 8 keys).
    float sc[kKeys / 8][4];
    for (int n = 0; n < kKeys / 8; ++n) {
      sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t kb0, kb1;
        LoadB(k_tile, kD + kPad, n * 8, ks * 16, group, quad, kb0, kb1);
        MmaBf16(sc[n], qa[ks], kb0, kb1);
      }
    }
    // Scores in log2 units, masked; the tile needs no mask when every pair is visible.
    const int j_first = p.key_begin + b0;
    const bool full = k_valid == kKeys && q_valid == kForwardQueries &&
                      j_first + kKeys - 1 <= first_i && j_first >= last_start;
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < kKeys / 8; ++n) {
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, col = n * 8 + 2 * quad + (e & 1);
        float x = sc[n][e] * p.scale_log2;
        if (!full &&
            !(col < k_valid && Visible(query_index[h], document_start[h], j_first + col))) {
          x = -INFINITY;
        }
        sc[n][e] = x;
        tile_max[h] = fmaxf(tile_max[h], x);
      }
    }
    float correction[2];
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(row_max[h], tile_max[h]);
      const float reference = new_max == -INFINITY ? 0.0f : new_max;  // no NaN from -inf - -inf
      correction[h] = exp2f(row_max[h] - reference);
      row_max[h] = new_max;
      row_sum[h] *= correction[h];
      for (int n = 0; n < kKeys / 8; ++n) {
        for (int c = 0; c < 2; ++c) {
          const float pv = exp2f(sc[n][2 * h + c] - reference);
          sc[n][2 * h + c] = pv;
          row_sum[h] += pv;
        }
      }
    }
    for (int n = 0; n < kD / 8; ++n) {
      o[n][0] *= correction[0];
      o[n][1] *= correction[0];
      o[n][2] *= correction[1];
      o[n][3] *= correction[1];
    }
    // O += P v~ (P rounded to bf16 in registers; v~'s B fragments by transposing loads: lane l
    // addresses key 16 kk + 8 ((l / 8) % 2) + l % 8, dims 8 n + 8 (l / 16), for tiles n, n + 1).
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t pa[4];
      AccumulatorsAsA(sc[2 * kk], sc[2 * kk + 1], pa);
      const int key = kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
      for (int n = 0; n < kD / 8; n += 2) {
        uint32_t vb[4];
        LoadMatricesTransposed(v_tile + key * (kD + kPad) + n * 8 + (lane / 16) * 8, vb);
        MmaBf16(o[n], pa, vb[0], vb[1]);
        MmaBf16(o[n + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }

  // Normalise and store; rows with no visible key get out = 0 and lse = -inf.
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    const int r = warp * 16 + group + 8 * h;
    if (r >= q_valid) continue;
    const bool any = row_sum[h] > 0.0f;
    const float inv = any ? 1.0f / row_sum[h] : 0.0f;
    const int64_t vector = (q_token0 + r) * p.heads + head;
    bf16* dst = out + vector * kD;
    for (int n = 0; n < kD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8 + 2 * quad) =
          PackBf16x2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
    if (quad == 0) lse[vector] = any ? (row_max[h] + log2f(row_sum[h])) * kLn2 : -INFINITY;
  }
}

template <int kD>
struct BackwardSmem {
  bf16 k[kKeys][kD + kPad];                 // k~ (A of S^T)
  bf16 kt[kD][kKeys + kPad];                // k~ transposed (B of dQ)
  bf16 v[kKeys][kD + kPad];                 // v~ (A of dP^T)
  bf16 q[kBackwardQueries][kD + kPad];      // q~ (B of S^T)
  bf16 qt[kD][kBackwardQueries + kPad];     // q~ transposed (B of dK)
  bf16 dout[kBackwardQueries][kD + kPad];   // dO (B of dP^T)
  bf16 doutt[kD][kBackwardQueries + kPad];  // dO transposed (B of dV)
  bf16 ds[kBackwardQueries][kKeys + kPad];  // dS (A of dQ)
  float lse[kBackwardQueries];              // log2 units
  float delta[kBackwardQueries];            // rowsum(dO * O)
  int query_index[kBackwardQueries];        // global i, -1 past the end
  int document_start[kBackwardQueries];     // i - p_i
};

struct BackwardOutputs {
  const bf16* dout;    // [Nq, H, d]
  const float* lse;    // [Nq, H] merged log-sum-exp
  const float* delta;  // [Nq, H] rowsum(dO * O) of the merged out
  float* dq;           // [Nq, H, d] dL/dq~, accumulated with atomics (zeroed first)
  float* dk;           // [Nk, G, d] dL/dk~, written
  float* dv;           // [Nk, G, d] dL/dv~, written
  float scale;         // 1 / sqrt(d)
};

// grid (key tiles, G, B), kThreads threads: one CTA per 64 keys of one kv head of one row loops
// over the group's heads and the query tiles that see its keys, recomputing P from lse. Warp w
// owns keys 16w..16w+15 for S^T, dP^T, dV and dK (registers, f32); dQ~ of each query tile goes
// through shared dS and f32 atomics.
template <int kD>
__global__ void __launch_bounds__(kThreads) BackwardKernel(AttentionParams p, BackwardOutputs g) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  BackwardSmem<kD>& s = *reinterpret_cast<BackwardSmem<kD>*>(smem_bytes);
  const int key_tile = blockIdx.x, kv_head = blockIdx.y, row = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const int b0 = key_tile * kKeys;
  const int k_valid = min(kKeys, p.key_count - b0);
  const int64_t k_token0 = static_cast<int64_t>(row) * p.key_count + b0;
  const int group_size = p.heads / p.kv_heads;

  LoadTile<kD, kKeys>(&s.k[0][0], p.k + (k_token0 * p.kv_heads + kv_head) * kD,
                      static_cast<int64_t>(p.kv_heads) * kD, k_valid);
  LoadTile<kD, kKeys>(&s.v[0][0], p.v + (k_token0 * p.kv_heads + kv_head) * kD,
                      static_cast<int64_t>(p.kv_heads) * kD, k_valid);
  __syncthreads();
  TransposeTile<kD, kKeys>(&s.k[0][0], &s.kt[0][0]);  // read after the loop's first barrier

  // This thread's two key rows (16w + group and + 8) as global indices; rows past the end get
  // INT32_MAX, which no query sees (j <= i fails).
  int key_index[2];
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + group + 8 * h;
    key_index[h] = r < k_valid ? p.key_begin + b0 + r : INT32_MAX;
  }
  const int j_first = p.key_begin + b0, j_last = j_first + k_valid - 1;
  // Queries before the tile's first key see none of it; once a query tile's first document
  // starts after the last key, every later one does too.
  const int first_q_tile = max(0, j_first - p.query_begin) / kBackwardQueries;

  float dk[kD / 8][4], dv[kD / 8][4];
  for (int n = 0; n < kD / 8; ++n) {
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  }

  for (int hh = 0; hh < group_size; ++hh) {
    const int head = kv_head * group_size + hh;
    for (int q_tile = first_q_tile; q_tile * kBackwardQueries < p.query_count; ++q_tile) {
      const int a0 = q_tile * kBackwardQueries;
      const int q_valid = min(kBackwardQueries, p.query_count - a0);
      const int64_t q_token0 = static_cast<int64_t>(row) * p.query_count + a0;
      if (p.query_begin + a0 - p.query_positions[q_token0] > j_last) break;
      __syncthreads();  // every warp is done with the previous query tile
      const int64_t q_vector0 = q_token0 * p.heads + head;
      LoadTile<kD, kBackwardQueries>(&s.q[0][0], p.q + q_vector0 * kD,
                                     static_cast<int64_t>(p.heads) * kD, q_valid);
      LoadTile<kD, kBackwardQueries>(&s.dout[0][0], g.dout + q_vector0 * kD,
                                     static_cast<int64_t>(p.heads) * kD, q_valid);
      if (threadIdx.x < kBackwardQueries) {
        const int r = threadIdx.x;
        const bool valid = r < q_valid;
        const int64_t vector = q_vector0 + static_cast<int64_t>(r) * p.heads;
        s.query_index[r] = valid ? p.query_begin + a0 + r : -1;
        s.document_start[r] = valid ? p.query_begin + a0 + r - p.query_positions[q_token0 + r] : 0;
        s.lse[r] = valid ? g.lse[vector] * kLog2e : 0.0f;
        s.delta[r] = valid ? g.delta[vector] : 0.0f;
      }
      __syncthreads();
      TransposeTile<kD, kBackwardQueries>(&s.q[0][0], &s.qt[0][0]);
      TransposeTile<kD, kBackwardQueries>(&s.dout[0][0], &s.doutt[0][0]);

      // S^T = k~ q~^T and dP^T = v~ dO^T: 16 keys x 32 queries per warp.
      float st[kBackwardQueries / 8][4], dpt[kBackwardQueries / 8][4];
      for (int n = 0; n < kBackwardQueries / 8; ++n) {
        for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
      }
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t ka[4], va[4];
        LoadA(&s.k[0][0], kD + kPad, warp * 16, ks * 16, group, quad, ka);
        LoadA(&s.v[0][0], kD + kPad, warp * 16, ks * 16, group, quad, va);
        for (int n = 0; n < kBackwardQueries / 8; ++n) {
          uint32_t qb0, qb1, ob0, ob1;
          LoadB(&s.q[0][0], kD + kPad, n * 8, ks * 16, group, quad, qb0, qb1);
          LoadB(&s.dout[0][0], kD + kPad, n * 8, ks * 16, group, quad, ob0, ob1);
          MmaBf16(st[n], ka, qb0, qb1);
          MmaBf16(dpt[n], va, ob0, ob1);
        }
      }
      // P^T = 2^(S^T scale - lse) where visible, dS^T = P^T (dP^T - delta).
      for (int n = 0; n < kBackwardQueries / 8; ++n) {
        for (int e = 0; e < 4; ++e) {
          const int col = n * 8 + 2 * quad + (e & 1);
          const bool visible = Visible(s.query_index[col], s.document_start[col], key_index[e / 2]);
          const float pv = visible ? exp2f(st[n][e] * p.scale_log2 - s.lse[col]) : 0.0f;
          st[n][e] = pv;
          dpt[n][e] = pv * (dpt[n][e] - s.delta[col]);
        }
      }
      __syncthreads();  // the transposes are complete
      // dV += P^T dO and dK += dS^T q~ (the 1/sqrt(d) of dK applied at the end).
      for (int kk = 0; kk < kBackwardQueries / 16; ++kk) {
        uint32_t pa[4], da[4];
        AccumulatorsAsA(st[2 * kk], st[2 * kk + 1], pa);
        AccumulatorsAsA(dpt[2 * kk], dpt[2 * kk + 1], da);
        for (int n = 0; n < kD / 8; ++n) {
          uint32_t ob0, ob1, qb0, qb1;
          LoadB(&s.doutt[0][0], kBackwardQueries + kPad, n * 8, kk * 16, group, quad, ob0, ob1);
          LoadB(&s.qt[0][0], kBackwardQueries + kPad, n * 8, kk * 16, group, quad, qb0, qb1);
          MmaBf16(dv[n], pa, ob0, ob1);
          MmaBf16(dk[n], da, qb0, qb1);
        }
      }
      // dS to shared memory as [query][key].
      for (int n = 0; n < kBackwardQueries / 8; ++n) {
        for (int e = 0; e < 4; ++e) {
          s.ds[n * 8 + 2 * quad + (e & 1)][warp * 16 + group + 8 * (e / 2)] = bf16(dpt[n][e]);
        }
      }
      __syncthreads();
      // dq~ += dS k~ / sqrt(d): warp w takes query rows 16 (w % 2).. and half of the d columns.
      {
        constexpr int kColumnTiles = kD / 16;  // 8-column tiles per warp
        const int m0 = (warp % 2) * 16, n0 = (warp / 2) * kColumnTiles;
        float dq[kColumnTiles][4];
        for (int n = 0; n < kColumnTiles; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
        for (int kk = 0; kk < kKeys / 16; ++kk) {
          uint32_t a[4];
          LoadA(&s.ds[0][0], kKeys + kPad, m0, kk * 16, group, quad, a);
          for (int n = 0; n < kColumnTiles; ++n) {
            uint32_t kb0, kb1;
            LoadB(&s.kt[0][0], kKeys + kPad, (n0 + n) * 8, kk * 16, group, quad, kb0, kb1);
            MmaBf16(dq[n], a, kb0, kb1);
          }
        }
        for (int h = 0; h < 2; ++h) {
          const int r = m0 + group + 8 * h;
          if (r >= q_valid) continue;
          float* dst = g.dq + (q_vector0 + static_cast<int64_t>(r) * p.heads) * kD;
          for (int n = 0; n < kColumnTiles; ++n) {
            const int col = (n0 + n) * 8 + 2 * quad;
            atomicAdd(dst + col, dq[n][2 * h] * g.scale);
            atomicAdd(dst + col + 1, dq[n][2 * h + 1] * g.scale);
          }
        }
      }
    }
  }

  // dk~ and dv~ of this CTA's keys are complete: store them (every key row, zeros where no query
  // saw it).
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + group + 8 * h;
    if (r >= k_valid) continue;
    const int64_t vector = (k_token0 + r) * p.kv_heads + kv_head;
    for (int n = 0; n < kD / 8; ++n) {
      const int col = n * 8 + 2 * quad;
      *reinterpret_cast<float2*>(g.dk + vector * kD + col) =
          make_float2(dk[n][2 * h] * g.scale, dk[n][2 * h + 1] * g.scale);
      *reinterpret_cast<float2*>(g.dv + vector * kD + col) =
          make_float2(dv[n][2 * h], dv[n][2 * h + 1]);
    }
  }
}

// Calls fn.template operator()<kD>() for the supported head dims.
template <typename Fn>
void DispatchHeadDim(int64_t d, Fn&& fn) {
  if (d == 64) {
    fn.template operator()<64>();
  } else {
    KELVIN_CHECK_EQ(d, 128) << "the SSA CUDA kernels support head dims 64 and 128";
    fn.template operator()<128>();
  }
}

template <typename T>
T* DataOrNull(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

void CheckAligned(const Tensor& t, const char* name) {
  KELVIN_CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0)
      << "ssa_attention (CUDA): " << name << " " << t.ToString()
      << " must start 16-byte aligned for vector loads";
}

// out [N, heads, d] = bf16(tau R(x)) (PrepareKernel); positions null: no RoPE, tau null: 1.
void LaunchPrepare(cudaStream_t stream, const Tensor& x, const int32_t* positions,
                   const float* inv_freq, float rope_factor, const float* tau, Tensor& out) {
  const int64_t vectors = x.dim(0) * x.dim(1);
  if (vectors == 0) return;
  DispatchHeadDim(x.dim(2), [&]<int kD>() {
    const int64_t items = vectors * (kD / 16);
    PrepareKernel<kD><<<static_cast<unsigned>(cuda_utils::CeilDiv(items, 256)), 256, 0, stream>>>(
        x.data<bf16>(), positions, inv_freq, rope_factor, tau, vectors, static_cast<int>(x.dim(1)),
        out.data<bf16>());
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

// The tiles both attention kernels read, written once per call: q~ [Nq, H, d], k~ [Nk, G, d],
// v~ [Nk, G, d] (v itself when the value temperature is off).
struct PreparedTiles {
  Tensor q, k, v;
};

// The keys' positions: their own for a key block, else the queries'.
const int32_t* KeyPositions(const SsaAttentionInputs& in) {
  return in.key_positions.defined() ? in.key_positions.data<int32_t>()
                                    : in.query_positions.data<int32_t>();
}

// Writes q~ = bf16(tau^q R(u)), k~ = bf16(R(k)) and v~ = bf16(tau^v v) into bf16 scratch
// (PrepareKernel, O(N)), so the attention kernels copy plain tiles, the forward with cp.async
// while it computes. Against the letter of docs/ssa.md ("never writing q~ or v~ to memory:
// applied as tiles are loaded"): applying them on load repeated the rotation of every key for each
// of the T/64 query tiles that visit it (and of every query for each key tile in the backward),
// and a tile that must be transformed cannot be copied by cp.async. The values are the same bf16;
// nothing more is saved for the backward (which writes them again); the cost is transient scratch
// of Nq x H x d + 2 x Nk x G x d bf16 during each call (96 MiB for a Llama-3-8B layer at 8K
// tokens; v~ only with the value temperature on). Measured on an H200: forward 2.1-2.6x faster
// (bench/RESULTS.md).
PreparedTiles Prepare(const Context& ctx, const SsaAttentionInputs& in, const float* tau_q,
                      const float* tau_v) {
  CheckAligned(in.u, "u");
  CheckAligned(in.k, "k");
  CheckAligned(in.v, "v");
  cudaStream_t stream = StreamOf(ctx);
  const float* inv_freq = in.inv_freq.data<float>();
  PreparedTiles t{Tensor::Empty(in.u.shape(), DType::kBF16, ctx.device()), in.k, in.v};
  const float rope_factor = static_cast<float>(in.rope_attention_factor);
  LaunchPrepare(stream, in.u, in.query_positions.data<int32_t>(), inv_freq, rope_factor, tau_q,
                t.q);
  if (!in.keys_prepared) {  // prepared keys are k~ already (PrepareKeysAndValues)
    t.k = Tensor::Empty(in.k.shape(), DType::kBF16, ctx.device());
    LaunchPrepare(stream, in.k, KeyPositions(in), inv_freq, rope_factor, nullptr, t.k);
  }
  if (tau_v != nullptr) {
    t.v = Tensor::Empty(in.v.shape(), DType::kBF16, ctx.device());
    LaunchPrepare(stream, in.v, nullptr, nullptr, 1.0f, tau_v, t.v);
  }
  return t;
}

// The parameters both attention kernels share.
AttentionParams MakeParams(const SsaBlockShape& shape, const SsaAttentionInputs& in,
                           const PreparedTiles& tiles) {
  KELVIN_CHECK(shape.query_begin + shape.query_count < INT32_MAX &&
               shape.key_begin + shape.key_count < INT32_MAX)
      << "ssa_attention (CUDA): global token indices must fit in 32 bits";
  AttentionParams p;
  p.q = tiles.q.data<bf16>();
  p.k = tiles.k.data<bf16>();
  p.v = tiles.v.data<bf16>();
  p.query_positions = in.query_positions.data<int32_t>();
  p.key_positions = KeyPositions(in);
  p.query_begin = static_cast<int>(shape.query_begin);
  p.query_count = static_cast<int>(shape.query_count);
  p.key_begin = static_cast<int>(shape.key_begin);
  p.key_count = static_cast<int>(shape.key_count);
  p.heads = static_cast<int>(in.u.dim(1));
  p.kv_heads = static_cast<int>(in.k.dim(1));
  p.scale_log2 = kLog2e / std::sqrt(static_cast<float>(in.u.dim(2)));
  return p;
}

template <typename Kernel>
void AllowSharedMemory(Kernel kernel, size_t bytes) {
  KELVIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
}

// The own kernel's forward on prepared tiles: out [Nq, H, d], lse [Nq, H].
void FusedForward(cudaStream_t stream, const SsaBlockShape& shape, const AttentionParams& p,
                  int64_t d, bf16* out, float* lse) {
  const dim3 grid(static_cast<unsigned>(cuda_utils::CeilDiv(shape.query_count, kForwardQueries)),
                  static_cast<unsigned>(p.heads), static_cast<unsigned>(shape.batch));
  DispatchHeadDim(d, [&]<int kD>() {
    const size_t bytes = sizeof(ForwardSmem<kD>);
    AllowSharedMemory(ForwardKernel<kD>, bytes);
    ForwardKernel<kD><<<grid, kThreads, bytes, stream>>>(p, out, lse);
    KELVIN_CUDA_CHECK_LAUNCH();
  });
}

// The own kernel's backward: dq~ [Nq, H, d] (zeroed, then accumulated), dk~ and dv~ [Nk, G, d]
// (written, zeros where no query sees a key), f32, from dout and the saved out and lse.
void FusedBackward(const Context& ctx, const SsaBlockShape& shape, const AttentionParams& p,
                   int64_t d, const bf16* dout, const bf16* out, const float* lse, Tensor& dq,
                   Tensor& dk, Tensor& dv) {
  cudaStream_t stream = StreamOf(ctx);
  const int64_t nq = dq.dim(0);
  Tensor delta = Tensor::Empty({nq, p.heads}, DType::kF32, ctx.device());  // [Nq, H]
  Zero(ctx, dq);
  LaunchRowDot(stream, static_cast<int>(d), dout, out, nq * p.heads, delta.data<float>());
  BackwardOutputs g;
  g.dout = dout;
  g.lse = lse;
  g.delta = delta.data<float>();
  g.dq = dq.data<float>();
  g.dk = dk.data<float>();
  g.dv = dv.data<float>();
  g.scale = 1.0f / std::sqrt(static_cast<float>(d));
  const dim3 grid(static_cast<unsigned>(cuda_utils::CeilDiv(shape.key_count, kKeys)),
                  static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(shape.batch));
  DispatchHeadDim(d, [&]<int kD>() {
    const size_t bytes = sizeof(BackwardSmem<kD>);
    AllowSharedMemory(BackwardKernel<kD>, bytes);
    BackwardKernel<kD><<<grid, kThreads, bytes, stream>>>(p, g);
    KELVIN_CUDA_CHECK_LAUNCH();
  });
  // delta returns to the allocator's cache, handed out again only to work on this stream.
}

#if KELVIN_WITH_CUDNN

// Writes `message` to the log the first time it comes.
void LogOnce(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) KLOG(INFO) << message;
}

// "SSA attention, B x [qb, +Tq) queries against [kb, +Tk) keys, H / G heads, d": log prefix.
std::string Describe(const SsaBlockShape& s, const AttentionParams& p, int64_t d) {
  return absl::StrCat("SSA attention, ", s.batch, " x [", s.query_begin, ", +", s.query_count,
                      ") queries against [", s.key_begin, ", +", s.key_count, ") keys, H ", p.heads,
                      " / G ", p.kv_heads, ", d ", d);
}

// The core that runs a call and, for cuDNN, the call's segments.
struct CoreChoice {
  AttentionCore core = AttentionCore::kFused;
  AttentionSegments segments;
};

// The host position ids of one side: the caller's copy, else the device's (waits for the stream).
Tensor HostPositions(const Context& ctx, const Tensor& host, const Tensor& device) {
  if (host.defined()) return host;
  Tensor copy = Tensor::Empty(device.shape(), DType::kI32);
  CopyTensor(ctx, device, copy);
  return copy;
}

cudnn_core::Tiles CudnnTiles(const PreparedTiles& t) {
  return {t.q.data<bf16>(), t.k.data<bf16>(), t.v.data<bf16>(), t.q.dim(0),
          t.k.dim(0),       t.q.dim(1),       t.k.dim(1),       t.q.dim(2)};
}

// The shape an AUTO choice holds for.
struct AutoKey {
  int64_t batch, query_begin, query_count, key_begin, key_count, heads, kv_heads, head_dim;
  bool packed;  // more segments than rows: documents restart inside the rows
  auto operator<=>(const AutoKey&) const = default;
};

// Mean milliseconds of one fn() on the stream over kAutoIterations, after one untimed run.
constexpr int kAutoIterations = 3;
double MeanMs(cudaStream_t stream, const std::function<void()>& fn) {
  fn();
  cudaEvent_t start, stop;
  KELVIN_CUDA_CHECK(cudaEventCreate(&start));
  KELVIN_CUDA_CHECK(cudaEventCreate(&stop));
  KELVIN_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kAutoIterations; ++i) fn();
  KELVIN_CUDA_CHECK(cudaEventRecord(stop, stream));
  KELVIN_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  KELVIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  KELVIN_CUDA_CHECK(cudaEventDestroy(start));
  KELVIN_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / kAutoIterations;
}

// AUTO's measurement: forward + backward of each core on this call's tiles, into scratch (the
// caller's tensors untouched; the forward's out stands in for dout, whose values do not change
// the work). cuDNN's time is absent when it builds no plan for the shape.
CoreTimings TimeCores(const Context& ctx, const SsaBlockShape& shape, const AttentionParams& p,
                      int64_t d, const PreparedTiles& tiles, const AttentionSegments& segments,
                      const std::string& describe) {
  const Device device = ctx.device();
  cudaStream_t stream = StreamOf(ctx);
  const int64_t nq = tiles.q.dim(0), nk = tiles.k.dim(0), h = p.heads, g = p.kv_heads;
  Tensor out = Tensor::Empty({nq, h, d}, DType::kBF16, device);  // [Nq, H, d]
  Tensor lse = Tensor::Empty({nq, h}, DType::kF32, device);      // [Nq, H]
  CoreTimings timings;
  {
    Tensor dq = Tensor::Empty({nq, h, d}, DType::kF32, device);  // [Nq, H, d]
    Tensor dk = Tensor::Empty({nk, g, d}, DType::kF32, device);  // [Nk, G, d]
    Tensor dv = Tensor::Empty({nk, g, d}, DType::kF32, device);  // [Nk, G, d]
    timings.fused_ms = MeanMs(stream, [&] {
      FusedForward(stream, shape, p, d, out.data<bf16>(), lse.data<float>());
      FusedBackward(ctx, shape, p, d, out.data<bf16>(), out.data<bf16>(), lse.data<float>(), dq, dk,
                    dv);
    });
  }
  Tensor dq = Tensor::Empty({nq, h, d}, DType::kBF16, device);  // [Nq, H, d]
  Tensor dk = Tensor::Empty({nk, g, d}, DType::kBF16, device);  // [Nk, G, d]
  Tensor dv = Tensor::Empty({nk, g, d}, DType::kBF16, device);  // [Nk, G, d]
  const cudnn_core::Tiles t = CudnnTiles(tiles);
  auto backward = [&] {
    return cudnn_core::Backward(ctx, segments, t, out.data<bf16>(), lse.data<float>(),
                                out.data<bf16>(), dq.data<bf16>(), dk.data<bf16>(),
                                dv.data<bf16>());
  };
  absl::Status runs = cudnn_core::Forward(ctx, segments, t, out.data<bf16>(), lse.data<float>());
  if (runs.ok()) runs.Update(backward());
  if (!runs.ok()) {
    LogOnce(absl::StrCat(describe, ": cuDNN builds no plan (", runs.message(),
                         "); the own kernel runs"));
    return timings;
  }
  timings.cudnn_ms = MeanMs(stream, [&] {
    KELVIN_CHECK(cudnn_core::Forward(ctx, segments, t, out.data<bf16>(), lse.data<float>()).ok());
    KELVIN_CHECK(backward().ok());
  });
  return timings;
}

// Which core runs this call (AttentionCoreOptions): FUSED the own kernel; CUDNN the cuDNN core
// where it can run the call; AUTO the faster of the two for the call's shape, measured at its
// first call (both cores write the same result within the bf16 rule the tests hold them to).
CoreChoice ChooseCore(const Context& ctx, const AttentionCoreOptions& options,
                      const SsaBlockShape& shape, const SsaAttentionInputs& in,
                      const PreparedTiles& tiles, const AttentionParams& p) {
  if (options.backend == AttentionBackend::kFused) return {};
  const int64_t d = tiles.q.dim(2);
  const std::string describe = Describe(shape, p, d);
  const std::string unavailable = cudnn_core::UnavailableReason(ctx);
  if (!unavailable.empty()) {
    LogOnce(absl::StrCat("SSA attention: the cuDNN core cannot run here (", unavailable,
                         "); the own kernel runs"));
    return {};
  }
  const Tensor host_q = HostPositions(ctx, options.host_query_positions, in.query_positions);
  const Tensor host_k = in.key_positions.defined()
                            ? HostPositions(ctx, options.host_key_positions, in.key_positions)
                            : host_q;
  absl::StatusOr<AttentionSegments> segments =
      SegmentDocuments(shape, host_q.data<int32_t>(), host_k.data<int32_t>());
  if (!segments.ok()) {
    LogOnce(absl::StrCat(describe, ": the cuDNN core cannot express it (",
                         segments.status().message(), "); the own kernel runs"));
    return {};
  }
  CoreChoice choice{AttentionCore::kCudnn, *std::move(segments)};
  if (options.backend == AttentionBackend::kCudnn) return choice;

  static std::mutex mutex;
  static std::map<AutoKey, AttentionCore> chosen;
  const AutoKey key{shape.batch,
                    shape.query_begin,
                    shape.query_count,
                    shape.key_begin,
                    shape.key_count,
                    p.heads,
                    p.kv_heads,
                    d,
                    choice.segments.count() > shape.batch};
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = chosen.find(key); it != chosen.end()) {
    choice.core = it->second;
    return choice;
  }
  const CoreTimings timings = TimeCores(ctx, shape, p, d, tiles, choice.segments, describe);
  choice.core = ChooseAttentionCore(timings);
  chosen.emplace(key, choice.core);
  KLOG(INFO) << describe << (key.packed ? ", packed documents" : "") << " (AUTO): fused "
             << timings.fused_ms << " ms, cuDNN "
             << (timings.cudnn_ms ? absl::StrCat(*timings.cudnn_ms, " ms") : "no plan")
             << " (forward + backward, mean of " << kAutoIterations
             << "): " << AttentionCoreName(choice.core) << " runs it";
  return choice;
}

#endif  // KELVIN_WITH_CUDNN

}  // namespace
}  // namespace cuda_internal

namespace cuda {

using namespace cuda_internal;

void SsaAttentionForward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs, const AttentionCoreOptions& core) {
  const int64_t nq = inputs.u.dim(0), nk = inputs.k.dim(0);
  const int64_t h = inputs.u.dim(1), g = inputs.k.dim(1), d = inputs.u.dim(2);
  cudaStream_t stream = StreamOf(ctx);
  const TemperatureTerms query_terms = QueryTerms(options), value_terms = ValueTerms(options);
  float* tau_q = nullptr;
  float* tau_v = nullptr;
  if (query_terms.active) {
    tau_q = outputs.query_temperature.data<float>();
    const Tensor& source = options.weight_sharing ? inputs.u : inputs.query_source;
    LaunchTemperatureForward(stream, static_cast<int>(d), query_terms, DataOrNull<bf16>(source),
                             DataOrNull<bf16>(params.query_readout), DataOrNull<bf16>(params.alpha),
                             inputs.query_positions.data<int32_t>(), nq, static_cast<int>(h),
                             tau_q);
  }
  if (value_terms.active) {
    tau_v = outputs.value_temperature.data<float>();
    const Tensor& source = options.weight_sharing ? inputs.v : inputs.value_source;
    LaunchTemperatureForward(stream, static_cast<int>(d), value_terms, DataOrNull<bf16>(source),
                             DataOrNull<bf16>(params.value_readout), nullptr, nullptr, nk,
                             static_cast<int>(g), tau_v);
  }
  const PreparedTiles tiles = Prepare(ctx, inputs, tau_q, tau_v);
  const AttentionParams p = MakeParams(shape, inputs, tiles);
  CheckAligned(outputs.out, "out");
#if KELVIN_WITH_CUDNN
  const CoreChoice choice = ChooseCore(ctx, core, shape, inputs, tiles, p);
  if (choice.core == AttentionCore::kCudnn) {
    const absl::Status ran =
        cudnn_core::Forward(ctx, choice.segments, CudnnTiles(tiles), outputs.out.data<bf16>(),
                            outputs.lse.data<float>());
    if (ran.ok()) {
      if (core.core_run != nullptr) *core.core_run = AttentionCore::kCudnn;
      return;
    }
    LogOnce(absl::StrCat(Describe(shape, p, d), ": cuDNN builds no forward plan (", ran.message(),
                         "); the own kernel runs"));
  }
#endif
  FusedForward(stream, shape, p, d, outputs.out.data<bf16>(), outputs.lse.data<float>());
  if (core.core_run != nullptr) *core.core_run = AttentionCore::kFused;
}

void SsaAttentionBackward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                          const Tensor& dout, const SsaAttentionInputs& inputs,
                          const SsaParameters& params, const SsaAttentionOutputs& saved,
                          SsaAttentionGrads& grads, const AttentionCoreOptions& core) {
  const int64_t nq = inputs.u.dim(0), nk = inputs.k.dim(0);
  const int64_t h = inputs.u.dim(1), g = inputs.k.dim(1), d = inputs.u.dim(2);
  const int dim = static_cast<int>(d);
  cudaStream_t stream = StreamOf(ctx);
  const TemperatureTerms query_terms = QueryTerms(options), value_terms = ValueTerms(options);
  const float* tau_q = query_terms.active ? saved.query_temperature.data<float>() : nullptr;
  const float* tau_v = value_terms.active ? saved.value_temperature.data<float>() : nullptr;
  const Device device = ctx.device();
  CheckAligned(dout, "dout");

  const PreparedTiles tiles = Prepare(ctx, inputs, tau_q, tau_v);
  const AttentionParams p = MakeParams(shape, inputs, tiles);
  // Scratch: the gradients of q~ [Nq, H, d], k~ and v~ [Nk, G, d]; bf16 from the cuDNN core, f32
  // from the own kernel. AttentionBackwardScratchBytes (attention_scratch.h) reports this call's
  // buffers to the memory plan: a buffer added here is added there.
  Tensor dq_tilde, dk_tilde, dv_tilde;
  bool done = false;
#if KELVIN_WITH_CUDNN
  const CoreChoice choice = ChooseCore(ctx, core, shape, inputs, tiles, p);
  if (choice.core == AttentionCore::kCudnn) {
    dq_tilde = Tensor::Empty({nq, h, d}, DType::kBF16, device);
    dk_tilde = Tensor::Empty({nk, g, d}, DType::kBF16, device);
    dv_tilde = Tensor::Empty({nk, g, d}, DType::kBF16, device);
    if (choice.segments.uncovered_keys(nk) > 0) {  // keys no query sees: gradient 0
      Zero(ctx, dk_tilde);
      Zero(ctx, dv_tilde);
    }
    const absl::Status ran = cudnn_core::Backward(
        ctx, choice.segments, CudnnTiles(tiles), saved.out.data<bf16>(), saved.lse.data<float>(),
        dout.data<bf16>(), dq_tilde.data<bf16>(), dk_tilde.data<bf16>(), dv_tilde.data<bf16>());
    done = ran.ok();
    if (!done) {
      LogOnce(absl::StrCat(Describe(shape, p, d), ": cuDNN builds no backward plan (",
                           ran.message(), "); the own kernel runs"));
    }
  }
#endif
  if (!done) {
    dq_tilde = Tensor::Empty({nq, h, d}, DType::kF32, device);
    dk_tilde = Tensor::Empty({nk, g, d}, DType::kF32, device);
    dv_tilde = Tensor::Empty({nk, g, d}, DType::kF32, device);
    FusedBackward(ctx, shape, p, d, dout.data<bf16>(), saved.out.data<bf16>(),
                  saved.lse.data<float>(), dq_tilde, dk_tilde, dv_tilde);
  }
  if (core.core_run != nullptr)
    *core.core_run = done ? AttentionCore::kCudnn : AttentionCore::kFused;
  // dL/dx~ of one side for LaunchTokenBackward, in the dtype the core wrote.
  auto set_grad_tilde = [](TokenBackwardArgs& args, const Tensor& grad_tilde) {
    if (grad_tilde.dtype() == DType::kBF16) {
      args.grad_tilde_bf16 = grad_tilde.data<bf16>();
    } else {
      args.grad_tilde = grad_tilde.data<float>();
    }
  };

  // Per token: RoPE^T, the temperatures' chain rule, then the parameter reductions.
  Tensor dz_q, dposition_q, dz_v;  // [Nq, H], [Nq, H], [Nk, G] f32
  if (query_terms.token) dz_q = Tensor::Empty({nq, h}, DType::kF32, device);
  if (query_terms.position) dposition_q = Tensor::Empty({nq, h}, DType::kF32, device);
  if (value_terms.token) dz_v = Tensor::Empty({nk, g}, DType::kF32, device);

  const Tensor& query_source = options.weight_sharing ? inputs.u : inputs.query_source;
  Tensor& dquery_source = options.weight_sharing ? grads.du : grads.dquery_source;
  TokenBackwardArgs q;
  q.tokens = nq;
  q.heads = static_cast<int>(h);
  set_grad_tilde(q, dq_tilde);
  q.x = inputs.u.data<bf16>();
  q.positions = p.query_positions;
  q.inv_freq = inputs.inv_freq.data<float>();
  q.rope_attention_factor = static_cast<float>(inputs.rope_attention_factor);
  q.tau = tau_q;
  q.terms = query_terms;
  q.source = DataOrNull<bf16>(query_source);
  q.readout = DataOrNull<bf16>(params.query_readout);
  q.alpha = query_terms.position ? params.alpha.data<bf16>() : nullptr;
  q.dx = grads.du.data<bf16>();
  q.dsource = query_terms.token ? dquery_source.data<bf16>() : nullptr;
  q.dz = DataOrNull<float>(dz_q);
  q.dposition = DataOrNull<float>(dposition_q);
  LaunchTokenBackward(stream, dim, q);

  TokenBackwardArgs k;
  k.tokens = nk;
  k.heads = static_cast<int>(g);
  set_grad_tilde(k, dk_tilde);
  k.x = inputs.k.data<bf16>();
  k.positions = p.key_positions;
  k.inv_freq = inputs.inv_freq.data<float>();
  k.rope_attention_factor = static_cast<float>(inputs.rope_attention_factor);
  k.dx = grads.dk.data<bf16>();
  LaunchTokenBackward(stream, dim, k);

  const Tensor& value_source = options.weight_sharing ? inputs.v : inputs.value_source;
  Tensor& dvalue_source = options.weight_sharing ? grads.dv : grads.dvalue_source;
  TokenBackwardArgs v;
  v.tokens = nk;
  v.heads = static_cast<int>(g);
  set_grad_tilde(v, dv_tilde);
  v.x = inputs.v.data<bf16>();
  v.positions = p.key_positions;
  v.tau = tau_v;
  v.terms = value_terms;
  v.source = DataOrNull<bf16>(value_source);
  v.readout = DataOrNull<bf16>(params.value_readout);
  v.dx = grads.dv.data<bf16>();
  v.dsource = value_terms.token ? dvalue_source.data<bf16>() : nullptr;
  v.dz = DataOrNull<float>(dz_v);
  LaunchTokenBackward(stream, dim, v);

  if (query_terms.active) {
    LaunchParameterGrads(stream, dim, query_terms, q.source, q.dz, q.alpha, q.dposition, nq,
                         static_cast<int>(h), grads.params.query_readout.data<float>(),
                         grads.params.alpha.data<float>());
  }
  if (value_terms.active) {
    LaunchParameterGrads(stream, dim, value_terms, v.source, v.dz, nullptr, nullptr, nk,
                         static_cast<int>(g), grads.params.value_readout.data<float>(), nullptr);
  }
  // The scratch tensors return to the allocator's cache when this function ends; it hands them
  // out again only to work on this same stream, which runs after the kernels above.
}

// k~ and v~ by the PrepareKernel the forward runs on its keys (so the same bf16 values), tau^v by
// its temperature kernel; in place where the outputs are the inputs (each thread reads its
// elements before writing them).
void PrepareKeysAndValues(const Context& ctx, const SsaOptions& options, const Tensor& k,
                          const Tensor& v, const Tensor& value_source, const Tensor& positions,
                          const Tensor& inv_freq, const Tensor& value_readout, Tensor& k_prepared,
                          Tensor& v_prepared, Tensor& tau_v, double rope_attention_factor) {
  CheckAligned(k, "k");
  CheckAligned(v, "v");
  CheckAligned(k_prepared, "k_prepared");
  CheckAligned(v_prepared, "v_prepared");
  cudaStream_t stream = StreamOf(ctx);
  LaunchPrepare(stream, k, positions.data<int32_t>(), inv_freq.data<float>(),
                static_cast<float>(rope_attention_factor), nullptr, k_prepared);
  const TemperatureTerms value_terms = ValueTerms(options);
  if (!value_terms.active) {
    if (v_prepared.raw_data() != v.raw_data()) CopyTensor(ctx, v, v_prepared);
    return;
  }
  const int64_t n = v.dim(0), g = v.dim(1), d = v.dim(2);
  const Tensor& source = options.weight_sharing ? v : value_source;
  LaunchTemperatureForward(stream, static_cast<int>(d), value_terms, source.data<bf16>(),
                           value_readout.data<bf16>(), nullptr, nullptr, n, static_cast<int>(g),
                           tau_v.data<float>());
  LaunchPrepare(stream, v, nullptr, nullptr, 1.0f, tau_v.data<float>(), v_prepared);
}

}  // namespace cuda
}  // namespace kelvin::ssa
