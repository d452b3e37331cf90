// Tiled SSA attention on the CPU (f32, f64), FlashAttention-2 style: query tiles x key tiles with
// an online softmax, so no T x T matrix is ever formed; the backward recomputes P per tile from
// the saved log-sum-exp. With temperatures of exactly 1 the results are bit-identical to
// VanillaAttentionOptions() (an off temperature is never multiplied; all else is the same).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/rope.h"
#include "ssa/cpu_vector_math.h"
#include "ssa/ssa_attention.h"
#include "ssa/temperature.h"

namespace kelvin::ssa::cpu {
namespace {

// Tile sizes, measured single-threaded at d = 128, H/G = 4: 128 keys ran ~10% faster than 64 (the
// query tile is repacked per key tile); 256 keys or 512 rows were within the noise.
constexpr int64_t kKeyTile = 128;           // keys per tile
constexpr int64_t kQueryTileRows = 256;     // target rows (query tokens x stacked heads) per tile
constexpr int64_t kTemperatureChunk = 256;  // tokens per parallel temperature call
// Below these sizes a loop runs on one thread: waking the team costs more (elements of the
// O(N H d) passes; multiply-adds of the score GEMMs).
using ops::cpu::kParallelElements;
constexpr int64_t kParallelScoreWork = int64_t{1} << 22;

const Context& Cpu() {
  static const Context ctx = Context::Cpu();
  return ctx;
}

// c [m, n] = op(a) op(b) + beta c, row-major with leading dimensions lda, ldb, ldc. Tile products
// go through cblas_?gemm: OpenBLAS's OpenMP build runs single-threaded inside our parallel regions
// and picks AVX2/FMA kernels at run time, which hand loops in this file (compiled for baseline
// x86-64) cannot match. The softmax exponentials are cpu_vector_math.h's.
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

template <typename T>
T Dot(const T* a, const T* b, int64_t n) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Sizes, tiling and the mask of one call.
struct Geometry {
  int64_t batch, tq, tk, h, g, group, d;
  int64_t query_tile;  // query tokens per tile
  // [B*Tq]: the local key indices query (row, a) sees, inclusive; first > last when none.
  std::vector<int64_t> first_key, last_key;

  Geometry(const SsaBlockShape& s, const SsaAttentionInputs& in)
      : batch(s.batch),
        tq(s.query_count),
        tk(s.key_count),
        h(in.u.dim(1)),
        g(in.k.dim(1)),
        group(h / g),
        d(in.u.dim(2)),
        query_tile(std::clamp<int64_t>(kQueryTileRows / group, 16, 128)),
        first_key(static_cast<size_t>(batch * tq)),
        last_key(first_key.size()) {
    const int32_t* p = in.query_positions.data<int32_t>();
    for (int64_t q = 0; q < batch * tq; ++q) {
      const int64_t i = s.query_begin + q % tq;  // global index within the row
      first_key[q] = std::max<int64_t>(i - p[q] - s.key_begin, 0);
      last_key[q] = std::min<int64_t>(i - s.key_begin, tk - 1);
    }
  }

  int64_t query_tiles() const { return (tq + query_tile - 1) / query_tile; }
  int64_t key_tiles() const { return (tk + kKeyTile - 1) / kKeyTile; }
  int64_t max_tile_rows() const { return query_tile * group; }
  // Whether the tile loops are worth a thread team: the q . k products of all queries and keys.
  bool threaded() const { return batch * h * tq * tk * d >= kParallelScoreWork; }
  // Row of [B, G, Tq, H/G] where query token a of (row, kv head) starts its stacked heads.
  int64_t QueryRow(int64_t row, int64_t kv, int64_t a) const {
    return ((row * g + kv) * tq + a) * group;
  }
  // Row of [B, G, Tk] of key b of (row, kv head).
  int64_t KeyRow(int64_t row, int64_t kv, int64_t b) const { return (row * g + kv) * tk + b; }
};

enum class Overlap { kNone, kPartial, kFull };

// How the keys [j0, j1) meet the visible keys of the queries [a0, a1) of a row.
Overlap Classify(const Geometry& geo, int64_t row, int64_t a0, int64_t a1, int64_t j0, int64_t j1) {
  bool any = false, all = true;
  for (int64_t a = a0; a < a1; ++a) {
    const int64_t first = geo.first_key[row * geo.tq + a], last = geo.last_key[row * geo.tq + a];
    any = any || (first <= last && first < j1 && last >= j0);
    all = all && first <= j0 && last >= j1 - 1;
  }
  return !any ? Overlap::kNone : all ? Overlap::kFull : Overlap::kPartial;
}

// Sets the entries of s [(a1 - a0) * H/G, nk] (keys j0 .. j0 + nk) that a query cannot see.
template <typename T>
void MaskInvisible(const Geometry& geo, int64_t row, int64_t a0, int64_t a1, int64_t j0, int64_t nk,
                   T fill, T* s) {
  for (int64_t a = a0; a < a1; ++a) {
    const int64_t lo = std::clamp<int64_t>(geo.first_key[row * geo.tq + a] - j0, 0, nk);
    const int64_t hi = std::max(lo, std::clamp<int64_t>(geo.last_key[row * geo.tq + a] - j0 + 1, 0,
                                                        nk));  // visible: [lo, hi)
    for (int64_t r = 0; r < geo.group; ++r) {
      T* sr = s + ((a - a0) * geo.group + r) * nk;
      std::fill(sr, sr + lo, fill);
      std::fill(sr + hi, sr + nk, fill);
    }
  }
}

// The operands every tile reads, written once per call in tile order (O(N H d) scratch; a group's
// query heads stacked per token). The GPU kernel's "never write q~ or v~" contract is a bandwidth
// rule; on the CPU one rotated copy is cheaper than rotating every tile again, and it makes every
// GEMM operand contiguous.
template <typename T>
struct Operands {
  std::vector<T> q;  // [B, G, Tq, H/G, d] q^ = tau^q RoPE(u) / sqrt(d)
  std::vector<T> k;  // [B, G, Tk, d] k~ = RoPE(k)
  std::vector<T> v;  // [B, G, Tk, d] v~ = tau^v v
};

// rope_u [Nq, H, d] = RoPE(u); tau_q [Nq, H], tau_v [Nk, G] or nullptr for a temperature that
// is off (always nullptr for prepared keys, whose k is k~ already).
template <typename T>
Operands<T> PrepareOperands(const Geometry& geo, const SsaAttentionInputs& in,
                            const Tensor& key_positions, const Tensor& rope_u, const T* tau_q,
                            const T* tau_v) {
  const int64_t d = geo.d, h = geo.h, g = geo.g;
  Operands<T> x{std::vector<T>(static_cast<size_t>(geo.batch * geo.tq * h * d)),
                std::vector<T>(static_cast<size_t>(geo.batch * geo.tk * g * d)),
                std::vector<T>(static_cast<size_t>(geo.batch * geo.tk * g * d))};
  Tensor rope_k = in.k;  // [Nk, G, d]
  if (!in.keys_prepared) {
    rope_k = Tensor::Empty(in.k.shape(), in.k.dtype());
    ops::cpu::Rope(in.k, key_positions, in.inv_freq, ops::RopeDirection::kForward, rope_k,
                   in.rope_attention_factor);
  }
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  const T* ru = rope_u.data<T>();
  const T* rk = rope_k.data<T>();
  const T* v = in.v.data<T>();
#pragma omp parallel if (static_cast <int64_t>(x.q.size() + x.k.size()) >= kParallelElements)
  {
#pragma omp for collapse(2) schedule(static) nowait
    for (int64_t row = 0; row < geo.batch; ++row) {
      for (int64_t a = 0; a < geo.tq; ++a) {
        const int64_t token = row * geo.tq + a;
        for (int64_t head = 0; head < h; ++head) {
          const int64_t kv = head / geo.group;
          const T factor = tau_q != nullptr ? scale * tau_q[token * h + head] : scale;
          const T* src = ru + (token * h + head) * d;
          T* dst = x.q.data() + (geo.QueryRow(row, kv, a) + head % geo.group) * d;
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) dst[e] = src[e] * factor;
        }
      }
    }
#pragma omp for collapse(2) schedule(static)
    for (int64_t row = 0; row < geo.batch; ++row) {
      for (int64_t b = 0; b < geo.tk; ++b) {
        const int64_t token = row * geo.tk + b;
        for (int64_t kv = 0; kv < g; ++kv) {
          const int64_t src = (token * g + kv) * d, dst = geo.KeyRow(row, kv, b) * d;
          std::copy_n(rk + src, d, x.k.data() + dst);
          if (tau_v != nullptr) {
            const T tau = tau_v[token * g + kv];
#pragma omp simd
            for (int64_t e = 0; e < d; ++e) x.v[dst + e] = v[src + e] * tau;
          } else {
            std::copy_n(v + src, d, x.v.data() + dst);
          }
        }
      }
    }
  }
  return x;
}

// ---- Temperatures: ssa/temperature.h over chunks of tokens in parallel ----

// tau [N, K] and tanh_z [N, K] of the query temperature (query) or the value temperature.
template <typename T>
void TemperatureForward(bool query, const SsaOptions& options, const Tensor& source,
                        const Tensor& readout, const Tensor& alpha, const Tensor& positions,
                        Tensor& tau, Tensor& tanh_z) {
  const int64_t n = source.dim(0), chunks = (n + kTemperatureChunk - 1) / kTemperatureChunk;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kTemperatureChunk, end = std::min(n, begin + kTemperatureChunk);
    Tensor tau_part = tau.Slice(begin, end), tanh_part = tanh_z.Slice(begin, end);
    if (query) {
      QueryTemperatureForward(Cpu(), options, source.Slice(begin, end), readout, alpha,
                              positions.Slice(begin, end), tau_part, tanh_part);
    } else {
      ValueTemperatureForward(Cpu(), options, source.Slice(begin, end), readout, tau_part,
                              tanh_part);
    }
  }
}

// The temperature's backward from dtau [N, K]: dsource +=, dreadout +=, dalpha += (query only).
// Each chunk sums its parameter gradients apart; they are added in chunk order.
template <typename T>
void TemperatureBackward(bool query, const SsaOptions& options, const Tensor& dtau,
                         const Tensor& source, const Tensor& readout, const Tensor& alpha,
                         const Tensor& positions, Tensor& dsource, Tensor& dreadout,
                         Tensor* dalpha) {
  const int64_t n = source.dim(0), chunks = (n + kTemperatureChunk - 1) / kTemperatureChunk;
  const DType accum = AccumDType(source.dtype());
  Tensor tau = Tensor::Empty(dtau.shape(), accum), tanh_z = Tensor::Empty(dtau.shape(), accum);
  TemperatureForward<T>(query, options, source, readout, alpha, positions, tau, tanh_z);
  std::vector<Tensor> dreadout_parts(static_cast<size_t>(chunks));  // [K, d] each
  std::vector<Tensor> dalpha_parts(static_cast<size_t>(chunks));    // [H] each
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kTemperatureChunk, end = std::min(n, begin + kTemperatureChunk);
    dreadout_parts[c] = Tensor::ZerosCpu(dreadout.shape(), accum);
    Tensor dsource_part = dsource.Slice(begin, end);
    if (query) {
      dalpha_parts[c] = Tensor::ZerosCpu(dalpha->shape(), accum);
      QueryTemperatureBackward(Cpu(), options, dtau.Slice(begin, end), source.Slice(begin, end),
                               readout, alpha, positions.Slice(begin, end),
                               tanh_z.Slice(begin, end), dsource_part, dreadout_parts[c],
                               dalpha_parts[c]);
    } else {
      ValueTemperatureBackward(Cpu(), options, dtau.Slice(begin, end), source.Slice(begin, end),
                               readout, tanh_z.Slice(begin, end), dsource_part, dreadout_parts[c]);
    }
  }
  auto add_parts = [](const std::vector<Tensor>& parts, Tensor& total) {
    for (const Tensor& part : parts) {
      for (int64_t i = 0; i < total.numel(); ++i) total.data<T>()[i] += part.data<T>()[i];
    }
  };
  add_parts(dreadout_parts, dreadout);
  if (query) add_parts(dalpha_parts, *dalpha);
}

// ---- Forward ----

// One query tile's online softmax over one key tile: s [rows, nk] holds the scores and becomes
// P = exp(s - running max); the running max, sum and the accumulator acc [rows, d] are updated.
template <typename T>
void OnlineSoftmax(int64_t rows, int64_t nk, int64_t d, T* s, T* row_max, T* row_sum, T* acc) {
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    T* sr = s + i * nk;
    T tile_max = kMinusInf;
#pragma omp simd reduction(max : tile_max)
    for (int64_t c = 0; c < nk; ++c) tile_max = std::max(tile_max, sr[c]);
    const T new_max = std::max(row_max[i], tile_max);
    if (new_max == kMinusInf) {  // nothing visible yet in this row
      std::fill(sr, sr + nk, T(0));
      continue;
    }
    const T correction = std::exp(row_max[i] - new_max);  // 0 on the row's first visible tile
    row_sum[i] = row_sum[i] * correction + ExpShiftedSum(sr, nk, new_max);
    if (correction != T(1)) {
      T* ar = acc + i * d;
#pragma omp simd
      for (int64_t e = 0; e < d; ++e) ar[e] *= correction;
    }
    row_max[i] = new_max;
  }
}

// OpenMP over (row, kv head, query tile); the H/G query heads of a group share each K/V tile. Key
// tiles with no key in [i - p_i, i] for any query i of the tile are skipped (causal and document
// masking); only the tiles the mask cuts are masked.
template <typename T>
void ForwardTiles(const Geometry& geo, const Operands<T>& x, T* out, T* lse) {
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  const int64_t tiles = geo.query_tiles(), tasks = geo.batch * geo.g * tiles, d = geo.d;
  const size_t max_rows = static_cast<size_t>(geo.max_tile_rows());
#pragma omp parallel if (geo.threaded())
  {
    std::vector<T> scores(max_rows * kKeyTile);           // [rows, keys] S, then P
    std::vector<T> acc(max_rows * d);                     // [rows, d] unnormalised output
    std::vector<T> row_max(max_rows), row_sum(max_rows);  // [rows]
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qt = tiles - 1 - task % tiles;  // the last tiles see the most keys: first
      const int64_t row = task / tiles / geo.g, kv = task / tiles % geo.g;
      const int64_t a0 = qt * geo.query_tile, a1 = std::min(a0 + geo.query_tile, geo.tq);
      const int64_t rows = (a1 - a0) * geo.group;
      int64_t first = geo.tk, last = -1;  // keys any query of the tile sees
      for (int64_t a = a0; a < a1; ++a) {
        if (geo.first_key[row * geo.tq + a] > geo.last_key[row * geo.tq + a]) continue;
        first = std::min(first, geo.first_key[row * geo.tq + a]);
        last = std::max(last, geo.last_key[row * geo.tq + a]);
      }
      std::fill_n(acc.begin(), rows * d, T(0));
      std::fill_n(row_max.begin(), rows, kMinusInf);
      std::fill_n(row_sum.begin(), rows, T(0));
      const T* q = x.q.data() + geo.QueryRow(row, kv, a0) * d;  // [rows, d]
      const T* k = x.k.data() + geo.KeyRow(row, kv, 0) * d;     // [Tk, d]
      const T* v = x.v.data() + geo.KeyRow(row, kv, 0) * d;     // [Tk, d]
      for (int64_t j0 = first; j0 <= last; j0 += kKeyTile) {
        const int64_t nk = std::min(j0 + kKeyTile, last + 1) - j0;
        const Overlap overlap = Classify(geo, row, a0, a1, j0, j0 + nk);
        if (overlap == Overlap::kNone) continue;
        Gemm(false, true, rows, nk, d, q, d, k + j0 * d, d, T(0), scores.data(), nk);
        if (overlap == Overlap::kPartial) {
          MaskInvisible(geo, row, a0, a1, j0, nk, kMinusInf, scores.data());
        }
        OnlineSoftmax(rows, nk, d, scores.data(), row_max.data(), row_sum.data(), acc.data());
        Gemm(false, false, rows, d, nk, scores.data(), nk, v + j0 * d, d, T(1), acc.data(), d);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t token = row * geo.tq + a0 + i / geo.group;
        const int64_t head = kv * geo.group + i % geo.group;
        T* o = out + (token * geo.h + head) * d;
        if (row_sum[i] == T(0)) {  // no key of this call is visible: out 0, lse -inf
          std::fill(o, o + d, T(0));
          lse[token * geo.h + head] = kMinusInf;
          continue;
        }
        const T inv_sum = T(1) / row_sum[i];
        const T* ar = acc.data() + i * d;
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) o[e] = ar[e] * inv_sum;
        lse[token * geo.h + head] = row_max[i] + std::log(row_sum[i]);
      }
    }
  }
}

template <typename T>
void Forward(const SsaOptions& options, const SsaBlockShape& shape, const SsaAttentionInputs& in,
             const SsaParameters& params, SsaAttentionOutputs& outputs) {
  const Geometry geo(shape, in);
  const Tensor& key_positions = in.key_positions.defined() ? in.key_positions : in.query_positions;
  const T* tau_q = nullptr;
  const T* tau_v = nullptr;
  if (options.query_temperature) {
    Tensor tanh_z = Tensor::Empty(outputs.query_temperature.shape(), in.u.dtype());  // [Nq, H]
    TemperatureForward<T>(true, options, options.weight_sharing ? in.u : in.query_source,
                          params.query_readout, params.alpha, in.query_positions,
                          outputs.query_temperature, tanh_z);
    tau_q = outputs.query_temperature.data<T>();
  }
  if (options.value_temperature) {
    Tensor tanh_z = Tensor::Empty(outputs.value_temperature.shape(), in.v.dtype());  // [Nk, G]
    TemperatureForward<T>(false, options, options.weight_sharing ? in.v : in.value_source,
                          params.value_readout, Tensor(), Tensor(), outputs.value_temperature,
                          tanh_z);
    tau_v = outputs.value_temperature.data<T>();
  }
  Tensor rope_u = Tensor::Empty(in.u.shape(), in.u.dtype());  // [Nq, H, d]
  ops::cpu::Rope(in.u, in.query_positions, in.inv_freq, ops::RopeDirection::kForward, rope_u,
                 in.rope_attention_factor);
  const Operands<T> x = PrepareOperands<T>(geo, in, key_positions, rope_u, tau_q, tau_v);
  ForwardTiles<T>(geo, x, outputs.out.data<T>(), outputs.lse.data<T>());
}

// ---- Backward ----

// What the backward tiles read besides the operands, in the stacked query order [B, G, Tq, H/G].
template <typename T>
struct QuerySide {
  std::vector<T> dout;   // [B, G, Tq, H/G, d]
  std::vector<T> delta;  // [B, G, Tq, H/G] dO . O
  std::vector<T> lse;    // [B, G, Tq, H/G]
};

template <typename T>
QuerySide<T> StackQuerySide(const Geometry& geo, const T* dout, const T* out, const T* lse) {
  const int64_t d = geo.d, h = geo.h, n = geo.batch * geo.tq;
  QuerySide<T> side{std::vector<T>(static_cast<size_t>(n * h * d)),
                    std::vector<T>(static_cast<size_t>(n * h)),
                    std::vector<T>(static_cast<size_t>(n * h))};
#pragma omp parallel for schedule(static) if (n * h * d >= kParallelElements)
  for (int64_t token = 0; token < n; ++token) {
    const int64_t row = token / geo.tq, a = token % geo.tq;
    for (int64_t head = 0; head < h; ++head) {
      const int64_t stacked = geo.QueryRow(row, head / geo.group, a) + head % geo.group;
      const int64_t i = token * h + head;
      std::copy_n(dout + i * d, d, side.dout.data() + stacked * d);
      side.delta[stacked] = Dot(dout + i * d, out + i * d, d);
      side.lse[stacked] = lse[i];
    }
  }
  return side;
}

// The gradients of the operands: dq^ [B, G, Tq, H/G, d] as one partial per thread (their sum, in
// thread order, is dq^), dk~, dv~ [B, G, Tk, d].
template <typename T>
struct OperandGrads {
  std::vector<std::vector<T>> q_parts;
  std::vector<T> k, v;
};

// The backward's tasks (row, kv head, key tile) dealt into `lists` lists, each task (heaviest
// first) to the least loaded list, the work being the visible query-key pairs: a fixed schedule
// (dq^ is summed per thread, so tasks must not move between threads from run to run) that keeps
// the causal triangle balanced.
std::vector<std::vector<int64_t>> BalancedPlan(const Geometry& geo, int64_t lists) {
  const int64_t key_tiles = geo.key_tiles(), tasks = geo.batch * geo.g * key_tiles;
  std::vector<int64_t> work(static_cast<size_t>(tasks));
  for (int64_t row = 0; row < geo.batch; ++row) {
    for (int64_t kt = 0; kt < key_tiles; ++kt) {
      const int64_t j0 = kt * kKeyTile, j1 = std::min(j0 + kKeyTile, geo.tk);
      int64_t pairs = 0;
      for (int64_t a = 0; a < geo.tq; ++a) {
        pairs += std::max<int64_t>(0, std::min(geo.last_key[row * geo.tq + a], j1 - 1) -
                                          std::max(geo.first_key[row * geo.tq + a], j0) + 1);
      }
      for (int64_t kv = 0; kv < geo.g; ++kv) work[(row * geo.g + kv) * key_tiles + kt] = pairs;
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(tasks));
  for (int64_t task = 0; task < tasks; ++task) order[task] = task;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return work[a] > work[b]; });
  std::vector<std::vector<int64_t>> plan(static_cast<size_t>(lists));
  std::vector<int64_t> load(static_cast<size_t>(lists), 0);
  for (const int64_t task : order) {
    const size_t lightest = std::min_element(load.begin(), load.end()) - load.begin();
    plan[lightest].push_back(task);
    load[lightest] += work[task] + 1;
  }
  return plan;
}

// One backward task: the keys [j0, j0 + nk) of (row, kv head) against every query tile that sees
// them. Writes their dk~, dv~ (owned by the task) and adds into dq [B, G, Tq, H/G, d] (the
// thread's partial). p, ds: [max rows, kKeyTile] scratch.
template <typename T>
void BackwardTask(const Geometry& geo, const Operands<T>& x, const QuerySide<T>& side, int64_t task,
                  OperandGrads<T>& grads, T* dq, T* p, T* ds) {
  const int64_t d = geo.d, key_tiles = geo.key_tiles();
  const int64_t kt = task % key_tiles, row = task / key_tiles / geo.g;
  const int64_t kv = task / key_tiles % geo.g;
  const int64_t j0 = kt * kKeyTile, nk = std::min(j0 + kKeyTile, geo.tk) - j0;
  const T* k = x.k.data() + geo.KeyRow(row, kv, j0) * d;  // [nk, d]
  const T* v = x.v.data() + geo.KeyRow(row, kv, j0) * d;  // [nk, d]
  T* dk = grads.k.data() + geo.KeyRow(row, kv, j0) * d;   // [nk, d]
  T* dv = grads.v.data() + geo.KeyRow(row, kv, j0) * d;   // [nk, d]
  for (int64_t qt = 0; qt < geo.query_tiles(); ++qt) {
    const int64_t a0 = qt * geo.query_tile, a1 = std::min(a0 + geo.query_tile, geo.tq);
    const Overlap overlap = Classify(geo, row, a0, a1, j0, j0 + nk);
    if (overlap == Overlap::kNone) continue;
    const int64_t rows = (a1 - a0) * geo.group, first = geo.QueryRow(row, kv, a0);
    const T* q = x.q.data() + first * d;                      // [rows, d]
    const T* dout = side.dout.data() + first * d;             // [rows, d]
    Gemm(false, true, rows, nk, d, q, d, k, d, T(0), p, nk);  // S = q^ k~^T
    if (overlap == Overlap::kPartial) {
      MaskInvisible(geo, row, a0, a1, j0, nk, -std::numeric_limits<T>::infinity(), p);
    }
    for (int64_t i = 0; i < rows; ++i) ExpShifted(p + i * nk, nk, side.lse[first + i]);
    Gemm(false, true, rows, nk, d, dout, d, v, d, T(0), ds, nk);  // dP = dO v~^T
    Gemm(true, false, nk, d, rows, p, nk, dout, d, T(1), dv, d);  // dv~ += P^T dO
    for (int64_t i = 0; i < rows; ++i) {                          // dS = P (dP - dO . O)
      const T delta = side.delta[first + i];
      T* dsr = ds + i * nk;
      const T* pr = p + i * nk;
#pragma omp simd
      for (int64_t c = 0; c < nk; ++c) dsr[c] = pr[c] * (dsr[c] - delta);
    }
    Gemm(true, false, nk, d, rows, ds, nk, q, d, T(1), dk, d);               // dk~ += dS^T q^
    Gemm(false, false, rows, d, nk, ds, nk, k, d, T(1), dq + first * d, d);  // dq^ += dS k~
  }
}

// OpenMP over (row, kv head, key tile) tasks, dealt to the threads by BalancedPlan: each task owns
// its keys' dk~ and dv~ and adds dq^ into its thread's partial (one q^-sized buffer per thread).
template <typename T>
OperandGrads<T> BackwardTiles(const Geometry& geo, const Operands<T>& x, const QuerySide<T>& side) {
  const size_t max_rows = static_cast<size_t>(geo.max_tile_rows());
  const bool threaded = geo.threaded();
  const std::vector<std::vector<int64_t>> plan =
      BalancedPlan(geo, threaded ? omp_get_max_threads() : 1);
  OperandGrads<T> grads{std::vector<std::vector<T>>(plan.size()), std::vector<T>(x.k.size()),
                        std::vector<T>(x.v.size())};
#pragma omp parallel if (threaded)
  {
    const int team = omp_get_num_threads(), thread = omp_get_thread_num();
    std::vector<T>& dq = grads.q_parts[thread];  // this thread's dq^ partial
    dq.assign(x.q.size(), T(0));
    std::vector<T> p(max_rows * kKeyTile);   // [rows, keys] S, then P
    std::vector<T> ds(max_rows * kKeyTile);  // [rows, keys] dP, then dS
    for (size_t list = thread; list < plan.size(); list += team) {
      for (const int64_t task : plan[list]) {
        BackwardTask(geo, x, side, task, grads, dq.data(), p.data(), ds.data());
      }
    }
  }
  return grads;
}

// total += part elementwise (host tensors of one shape and dtype T).
template <typename T>
void AddInto(Tensor& total, const Tensor& part) {
  T* t = total.data<T>();
  const T* p = part.data<T>();
  const int64_t n = total.numel();
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) t[i] += p[i];
}

// The tiles' backward, the dq^ partials summed in thread order (deterministic for a given thread
// count), then RoPE^T, the temperature gradients dtau^q = RoPE(u) . dq^ / sqrt(d) and
// dtau^v = v . dv~, and ssa/temperature.h's backward.
template <typename T>
void Backward(const SsaOptions& options, const SsaBlockShape& shape, const Tensor& dout,
              const SsaAttentionInputs& in, const SsaParameters& params,
              const SsaAttentionOutputs& saved, SsaAttentionGrads& grads) {
  const Geometry geo(shape, in);
  const int64_t d = geo.d, h = geo.h, g = geo.g;
  const Tensor& key_positions = in.key_positions.defined() ? in.key_positions : in.query_positions;
  const T* tau_q = options.query_temperature ? saved.query_temperature.data<T>() : nullptr;
  const T* tau_v = options.value_temperature ? saved.value_temperature.data<T>() : nullptr;
  Tensor rope_u = Tensor::Empty(in.u.shape(), in.u.dtype());  // [Nq, H, d]
  ops::cpu::Rope(in.u, in.query_positions, in.inv_freq, ops::RopeDirection::kForward, rope_u,
                 in.rope_attention_factor);
  const OperandGrads<T> dx = BackwardTiles<T>(
      geo, PrepareOperands<T>(geo, in, key_positions, rope_u, tau_q, tau_v),
      StackQuerySide<T>(geo, dout.data<T>(), saved.out.data<T>(), saved.lse.data<T>()));

  // q^ = c RoPE(u), c = tau^q / sqrt(d): dRoPE(u) = c dq^, dtau^q = RoPE(u) . dq^ / sqrt(d).
  const int64_t nq = in.u.dim(0), nk = in.k.dim(0);
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  Tensor drope_u = Tensor::Empty(in.u.shape(), in.u.dtype());  // [Nq, H, d]
  Tensor dtau_q;                                               // [Nq, H]
  if (tau_q != nullptr) dtau_q = Tensor::Empty({nq, h}, in.u.dtype());
#pragma omp parallel if (nq * h * d >= kParallelElements)
  {
    std::vector<T> dq(static_cast<size_t>(d));  // dq^ of one (token, head): the partials' sum
#pragma omp for schedule(static)
    for (int64_t token = 0; token < nq; ++token) {
      for (int64_t head = 0; head < h; ++head) {
        const int64_t i = token * h + head;
        const int64_t stacked =
            (geo.QueryRow(token / geo.tq, head / geo.group, token % geo.tq) + head % geo.group) * d;
        std::fill(dq.begin(), dq.end(), T(0));
        for (const std::vector<T>& part : dx.q_parts) {
          if (part.empty()) continue;  // a thread the team did not get
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) dq[e] += part[stacked + e];
        }
        const T factor = tau_q != nullptr ? scale * tau_q[i] : scale;
        T* dr = drope_u.data<T>() + i * d;
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) dr[e] = dq[e] * factor;
        if (tau_q != nullptr) {
          dtau_q.data<T>()[i] = Dot(rope_u.data<T>() + i * d, dq.data(), d) * scale;
        }
      }
    }
  }
  ops::cpu::Rope(drope_u, in.query_positions, in.inv_freq, ops::RopeDirection::kBackward, drope_u,
                 in.rope_attention_factor);
  AddInto<T>(grads.du, drope_u);

  // k~ = RoPE(k): dk += RoPE^T(dk~). v~ = tau^v v: dv += tau^v dv~, dtau^v = v . dv~.
  Tensor dk_rotated = Tensor::Empty(in.k.shape(), in.k.dtype());  // [Nk, G, d]
  Tensor dtau_v;                                                  // [Nk, G]
  if (tau_v != nullptr) dtau_v = Tensor::Empty({nk, g}, in.v.dtype());
  T* dv_total = grads.dv.data<T>();
  const T* v = in.v.data<T>();
#pragma omp parallel for schedule(static) if (nk * g * d >= kParallelElements)
  for (int64_t token = 0; token < nk; ++token) {
    for (int64_t kv = 0; kv < g; ++kv) {
      const int64_t i = token * g + kv, stacked = geo.KeyRow(token / geo.tk, kv, token % geo.tk);
      std::copy_n(dx.k.data() + stacked * d, d, dk_rotated.data<T>() + i * d);
      const T* dv_tilde = dx.v.data() + stacked * d;
      T* dvi = dv_total + i * d;
      if (tau_v != nullptr) {
        const T tau = tau_v[i];
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) dvi[e] += dv_tilde[e] * tau;
        dtau_v.data<T>()[i] = Dot(v + i * d, dv_tilde, d);
      } else {
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) dvi[e] += dv_tilde[e];
      }
    }
  }
  ops::cpu::Rope(dk_rotated, key_positions, in.inv_freq, ops::RopeDirection::kBackward, dk_rotated,
                 in.rope_attention_factor);
  AddInto<T>(grads.dk, dk_rotated);

  // Through the temperatures into their sources (u and v themselves with weight sharing).
  if (tau_q != nullptr) {
    TemperatureBackward<T>(true, options, dtau_q, options.weight_sharing ? in.u : in.query_source,
                           params.query_readout, params.alpha, in.query_positions,
                           options.weight_sharing ? grads.du : grads.dquery_source,
                           grads.params.query_readout, &grads.params.alpha);
  }
  if (tau_v != nullptr) {
    TemperatureBackward<T>(false, options, dtau_v, options.weight_sharing ? in.v : in.value_source,
                           params.value_readout, Tensor(), Tensor(),
                           options.weight_sharing ? grads.dv : grads.dvalue_source,
                           grads.params.value_readout, nullptr);
  }
}

// ---- Keys prepared for a cache ----

// k~ = RoPE(k), tau_v, v~ = tau_v v as Forward computes them for its keys (the same functions,
// so the same values bit for bit).
template <typename T>
void PrepareKeys(const SsaOptions& options, const Tensor& k, const Tensor& v,
                 const Tensor& value_source, const Tensor& positions, const Tensor& inv_freq,
                 const Tensor& value_readout, Tensor& k_prepared, Tensor& v_prepared, Tensor& tau_v,
                 double rope_attention_factor) {
  ops::cpu::Rope(k, positions, inv_freq, ops::RopeDirection::kForward, k_prepared,
                 rope_attention_factor);
  const int64_t n = v.dim(0), g = v.dim(1), d = v.dim(2);
  if (!options.value_temperature) {
    if (v_prepared.raw_data() != v.raw_data())
      std::copy_n(v.data<T>(), n * g * d, v_prepared.data<T>());
    return;
  }
  Tensor tanh_z = Tensor::Empty(tau_v.shape(), tau_v.dtype());  // [N, G]
  TemperatureForward<T>(false, options, options.weight_sharing ? v : value_source, value_readout,
                        Tensor(), Tensor(), tau_v, tanh_z);
  const T* tau = tau_v.data<T>();
  const T* from = v.data<T>();
  T* to = v_prepared.data<T>();
#pragma omp parallel for schedule(static) if (n * g * d >= kParallelElements)
  for (int64_t vector = 0; vector < n * g; ++vector) {
#pragma omp simd
    for (int64_t e = 0; e < d; ++e) to[vector * d + e] = from[vector * d + e] * tau[vector];
  }
}

}  // namespace

void SsaAttentionForward(const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs) {
  ops::DispatchCpuFloat(inputs.u.dtype(), "SsaAttentionForward",
                        [&]<typename T>() { Forward<T>(options, shape, inputs, params, outputs); });
}

void SsaAttentionBackward(const SsaOptions& options, const SsaBlockShape& shape, const Tensor& dout,
                          const SsaAttentionInputs& inputs, const SsaParameters& params,
                          const SsaAttentionOutputs& saved, SsaAttentionGrads& grads) {
  ops::DispatchCpuFloat(inputs.u.dtype(), "SsaAttentionBackward", [&]<typename T>() {
    Backward<T>(options, shape, dout, inputs, params, saved, grads);
  });
}

void PrepareKeysAndValues(const SsaOptions& options, const Tensor& k, const Tensor& v,
                          const Tensor& value_source, const Tensor& positions,
                          const Tensor& inv_freq, const Tensor& value_readout, Tensor& k_prepared,
                          Tensor& v_prepared, Tensor& tau_v, double rope_attention_factor) {
  ops::DispatchCpuFloat(k.dtype(), "PrepareKeysAndValues", [&]<typename T>() {
    PrepareKeys<T>(options, k, v, value_source, positions, inv_freq, value_readout, k_prepared,
                   v_prepared, tau_v, rope_attention_factor);
  });
}

}  // namespace kelvin::ssa::cpu
