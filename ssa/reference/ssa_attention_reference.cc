// Naive SSA attention in f64: the temperatures from ssa/temperature.h, RoPE from core/ops/rope.h,
// then every visible score S = q~ . k~ / sqrt(d) with q~ = tau^q RoPE(u), k~ = RoPE(k),
// v~ = tau^v v. Backward: dS = P (dP - dO.O), dq~ = dS k~ / sqrt(d), dk~ = dS^T q~ / sqrt(d),
// dv~ = P^T dO, then through the temperatures and RoPE by the chain rule of docs/ssa.md "Backward".
#include "ssa/reference/ssa_attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/context.h"
#include "core/ops/rope.h"
#include "ssa/ssa_attention.h"
#include "ssa/temperature.h"

namespace kelvin::ssa::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const Context& Cpu() {
  static const Context ctx = Context::Cpu();
  return ctx;
}

Tensor Zeros(const Shape& shape) { return Tensor::ZerosCpu(shape, DType::kF64); }

void CheckF64(const Tensor& t, const Shape& shape, const char* name) {
  KELVIN_CHECK(t.defined()) << "ssa reference: " << name << " is undefined";
  KELVIN_CHECK(t.is_cpu() && t.dtype() == DType::kF64)
      << "ssa reference: " << name << " must be an f64 host tensor, got " << t.ToString();
  KELVIN_CHECK(t.shape() == shape) << "ssa reference: " << name << " is " << t.ToString()
                                   << ", expected shape " << ShapeToString(shape);
}

// x += y elementwise (f64 host tensors of one shape).
void AddInto(Tensor& x, const Tensor& y) {
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] += y.data<double>()[i];
}

// Position ids of one side of the block: within a row's chunk they restart at 0 or count up by
// one, and the first one cannot exceed its global token index.
void CheckPositions(const Tensor& positions, int64_t batch, int64_t begin, int64_t count,
                    const char* name) {
  KELVIN_CHECK(positions.defined() && positions.is_cpu() && positions.dtype() == DType::kI32 &&
               positions.shape() == Shape{batch * count})
      << "ssa reference: " << name << " must be i32 [" << batch * count << "] on the host, got "
      << positions.ToString();
  CheckPositionIds(positions, batch, begin, count, std::string("ssa reference: ") + name);
}

// Everything one call computes before its scores.
struct Block {
  const SsaBlockShape shape;
  const SsaOptions& options;
  const SsaAttentionInputs& in;
  const SsaParameters& params;
  int64_t h, g, d;
  Tensor key_positions;               // [Nk] i32
  Tensor query_source, value_source;  // [Nq, H, d], [Nk, G, d]: what the temperatures read
  Tensor tau_q, tanh_q;               // [Nq, H]
  Tensor tau_v, tanh_v;               // [Nk, G]
  Tensor rope_u;                      // [Nq, H, d] RoPE(u)
  Tensor rope_k;                      // [Nk, G, d] RoPE(k) = k~
  double scale;                       // 1 / sqrt(d)

  Block(const SsaOptions& o, const SsaBlockShape& s, const SsaAttentionInputs& i,
        const SsaParameters& p)
      : shape(s), options(o), in(i), params(p) {
    KELVIN_CHECK(in.u.defined() && in.u.ndim() == 3 && in.k.defined() && in.k.ndim() == 3)
        << "ssa reference: u must be [Nq, H, d] and k [Nk, G, d]";
    h = in.u.dim(1), g = in.k.dim(1), d = in.u.dim(2);
    KELVIN_CHECK(g > 0 && h % g == 0) << "ssa reference: " << h << " query heads are not a "
                                      << "multiple of " << g << " kv heads";
    const int64_t nq = shape.batch * shape.query_count, nk = shape.batch * shape.key_count;
    CheckF64(in.u, {nq, h, d}, "u");
    CheckF64(in.k, {nk, g, d}, "k");
    CheckF64(in.v, {nk, g, d}, "v");
    CheckF64(in.inv_freq, {d / 2}, "inv_freq");
    CheckF64(params.query_readout, {h, d}, "query_readout");
    CheckF64(params.value_readout, {g, d}, "value_readout");
    CheckF64(params.alpha, {h}, "alpha");
    key_positions = in.key_positions.defined() ? in.key_positions : in.query_positions;
    CheckPositions(in.query_positions, shape.batch, shape.query_begin, shape.query_count,
                   "query_positions");
    CheckPositions(key_positions, shape.batch, shape.key_begin, shape.key_count, "key_positions");
    if (options.weight_sharing) {
      KELVIN_CHECK(!in.query_source.defined() && !in.value_source.defined())
          << "ssa reference: with weight sharing the temperature sources are u and v; leave "
             "query_source and value_source undefined";
      query_source = in.u;
      value_source = in.v;
    } else {
      CheckF64(in.query_source, {nq, h, d}, "query_source");
      CheckF64(in.value_source, {nk, g, d}, "value_source");
      query_source = in.query_source;
      value_source = in.value_source;
    }
    tau_q = Zeros({nq, h}), tanh_q = Zeros({nq, h});
    tau_v = Zeros({nk, g}), tanh_v = Zeros({nk, g});
    QueryTemperatureForward(Cpu(), options, query_source, params.query_readout, params.alpha,
                            in.query_positions, tau_q, tanh_q);
    ValueTemperatureForward(Cpu(), options, value_source, params.value_readout, tau_v, tanh_v);
    rope_u = Zeros(in.u.shape());
    rope_k = Zeros(in.k.shape());
    ops::RopeForward(Cpu(), in.u, in.query_positions, in.inv_freq, rope_u,
                     in.rope_attention_factor);
    ops::RopeForward(Cpu(), in.k, key_positions, in.inv_freq, rope_k, in.rope_attention_factor);
    scale = 1.0 / std::sqrt(static_cast<double>(d));
  }

  int64_t QueryToken(int64_t row, int64_t a) const { return row * shape.query_count + a; }
  int64_t KeyToken(int64_t row, int64_t b) const { return row * shape.key_count + b; }
  int64_t KvHead(int64_t head) const { return head / (h / g); }

  // Query a of the row sees key b iff i - p_i <= j <= i in global indices; a visible key must
  // then carry the position p_i - (i - j) (same document).
  bool Visible(int64_t row, int64_t a, int64_t b) const {
    const int64_t i = shape.query_begin + a, j = shape.key_begin + b;
    const int32_t p_i = in.query_positions.data<int32_t>()[QueryToken(row, a)];
    const bool visible = j <= i && j >= i - p_i;
    if (visible) {
      const int32_t p_j = key_positions.data<int32_t>()[KeyToken(row, b)];
      KELVIN_CHECK_EQ(p_j, p_i - (i - j))
          << "ssa reference: key at global index " << j << " is in the document of query " << i
          << " but their position ids disagree";
    }
    return visible;
  }

  double QTilde(int64_t q_token, int64_t head, int64_t e) const {
    return tau_q.data<double>()[q_token * h + head] *
           rope_u.data<double>()[(q_token * h + head) * d + e];
  }
  double KTilde(int64_t k_token, int64_t kv_head, int64_t e) const {
    return rope_k.data<double>()[(k_token * g + kv_head) * d + e];
  }
  double VTilde(int64_t k_token, int64_t kv_head, int64_t e) const {
    return tau_v.data<double>()[k_token * g + kv_head] *
           in.v.data<double>()[(k_token * g + kv_head) * d + e];
  }
  double Score(int64_t q_token, int64_t head, int64_t k_token) const {
    double s = 0;
    for (int64_t e = 0; e < d; ++e)
      s += QTilde(q_token, head, e) * KTilde(k_token, KvHead(head), e);
    return s * scale;
  }
};

}  // namespace

void SsaAttentionBlockForward(const SsaOptions& options, const SsaBlockShape& shape,
                              const SsaAttentionInputs& inputs, const SsaParameters& params,
                              SsaAttentionOutputs& outputs) {
  const Block blk(options, shape, inputs, params);
  const int64_t h = blk.h, d = blk.d;
  CheckF64(outputs.out, inputs.u.shape(), "out");
  CheckF64(outputs.lse, {inputs.u.dim(0), h}, "lse");
  CheckF64(outputs.query_temperature, blk.tau_q.shape(), "query_temperature");
  CheckF64(outputs.value_temperature, blk.tau_v.shape(), "value_temperature");
  double* out = outputs.out.data<double>();
  double* lse = outputs.lse.data<double>();
  std::fill(out, out + outputs.out.numel(), 0.0);
  std::vector<double> scores(static_cast<size_t>(shape.key_count));
  for (int64_t row = 0; row < shape.batch; ++row) {
    for (int64_t head = 0; head < h; ++head) {
      for (int64_t a = 0; a < shape.query_count; ++a) {
        const int64_t qt = blk.QueryToken(row, a);
        double max_score = -kInf;
        for (int64_t b = 0; b < shape.key_count; ++b) {
          scores[b] = blk.Visible(row, a, b) ? blk.Score(qt, head, blk.KeyToken(row, b)) : -kInf;
          max_score = std::max(max_score, scores[b]);
        }
        if (max_score == -kInf) {  // no key of this block is visible: out stays 0
          lse[qt * h + head] = -kInf;
          continue;
        }
        double sum = 0;
        for (int64_t b = 0; b < shape.key_count; ++b) sum += std::exp(scores[b] - max_score);
        const double row_lse = max_score + std::log(sum);
        lse[qt * h + head] = row_lse;
        for (int64_t b = 0; b < shape.key_count; ++b) {
          if (scores[b] == -kInf) continue;
          const double p = std::exp(scores[b] - row_lse);
          for (int64_t e = 0; e < d; ++e) {
            out[(qt * h + head) * d + e] +=
                p * blk.VTilde(blk.KeyToken(row, b), blk.KvHead(head), e);
          }
        }
      }
    }
  }
  std::copy_n(blk.tau_q.data<double>(), blk.tau_q.numel(),
              outputs.query_temperature.data<double>());
  std::copy_n(blk.tau_v.data<double>(), blk.tau_v.numel(),
              outputs.value_temperature.data<double>());
}

void SsaAttentionForward(const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs) {
  KELVIN_CHECK(shape.query_begin == 0 && shape.key_begin == 0 &&
               shape.query_count == shape.key_count)
      << "ssa reference: the full operator takes SsaBlockShape::Full(B, T); use "
         "SsaAttentionBlockForward for a key block";
  if (inputs.key_positions.defined()) {
    KELVIN_CHECK(std::equal(inputs.key_positions.data<int32_t>(),
                            inputs.key_positions.data<int32_t>() + inputs.key_positions.numel(),
                            inputs.query_positions.data<int32_t>()))
        << "ssa reference: the full operator's key_positions differ from its query_positions";
  }
  SsaAttentionBlockForward(options, shape, inputs, params, outputs);
}

void MergeAttentionBlock(Tensor& out, Tensor& lse, const Tensor& block_out,
                         const Tensor& block_lse) {
  KELVIN_CHECK_EQ(out.ndim(), 3) << "merge: out must be [Nq, H, d], got " << out.ToString();
  const int64_t rows = out.dim(0) * out.dim(1), d = out.dim(2);
  CheckF64(out, out.shape(), "merge out");
  CheckF64(block_out, out.shape(), "merge block_out");
  CheckF64(lse, {out.dim(0), out.dim(1)}, "merge lse");
  CheckF64(block_lse, lse.shape(), "merge block_lse");
  for (int64_t r = 0; r < rows; ++r) {
    const double a = lse.data<double>()[r], b = block_lse.data<double>()[r];
    const double m = std::max(a, b);
    if (m == -kInf) continue;  // neither has a visible key: out stays 0
    const double merged = m + std::log(std::exp(a - m) + std::exp(b - m));
    const double wa = std::exp(a - merged), wb = std::exp(b - merged);
    for (int64_t e = 0; e < d; ++e) {
      double& o = out.data<double>()[r * d + e];
      o = wa * o + wb * block_out.data<double>()[r * d + e];
    }
    lse.data<double>()[r] = merged;
  }
}

void SsaAttentionBlockBackward(const SsaOptions& options, const SsaBlockShape& shape,
                               const Tensor& dout, const Tensor& out, const Tensor& lse,
                               const SsaAttentionInputs& inputs, const SsaParameters& params,
                               SsaAttentionGrads& grads) {
  const Block blk(options, shape, inputs, params);
  const int64_t h = blk.h, g = blk.g, d = blk.d;
  const int64_t nq = inputs.u.dim(0), nk = inputs.k.dim(0);
  CheckF64(dout, inputs.u.shape(), "dout");
  CheckF64(out, inputs.u.shape(), "out");
  CheckF64(lse, {nq, h}, "lse");
  CheckF64(grads.du, inputs.u.shape(), "du");
  CheckF64(grads.dk, inputs.k.shape(), "dk");
  CheckF64(grads.dv, inputs.k.shape(), "dv");
  CheckF64(grads.params.query_readout, {h, d}, "d query_readout");
  CheckF64(grads.params.value_readout, {g, d}, "d value_readout");
  CheckF64(grads.params.alpha, {h}, "d alpha");
  if (!options.weight_sharing) {
    CheckF64(grads.dquery_source, inputs.u.shape(), "dquery_source");
    CheckF64(grads.dvalue_source, inputs.k.shape(), "dvalue_source");
  }

  // Gradients of q~ [Nq, H, d], k~ [Nk, G, d], v~ [Nk, G, d].
  std::vector<double> dq(static_cast<size_t>(nq * h * d), 0.0);
  std::vector<double> dk(static_cast<size_t>(nk * g * d), 0.0), dv(dk.size(), 0.0);
  const double* dov = dout.data<double>();
  const double* ov = out.data<double>();
  for (int64_t row = 0; row < shape.batch; ++row) {
    for (int64_t head = 0; head < h; ++head) {
      const int64_t kv = blk.KvHead(head);
      for (int64_t a = 0; a < shape.query_count; ++a) {
        const int64_t qt = blk.QueryToken(row, a), qi = (qt * h + head) * d;
        double delta = 0;  // rowsum(P * dP) over all keys = dO . O
        for (int64_t e = 0; e < d; ++e) delta += dov[qi + e] * ov[qi + e];
        for (int64_t b = 0; b < shape.key_count; ++b) {
          if (!blk.Visible(row, a, b)) continue;
          const int64_t kt = blk.KeyToken(row, b), ki = (kt * g + kv) * d;
          const double p = std::exp(blk.Score(qt, head, kt) - lse.data<double>()[qt * h + head]);
          double dp = 0;
          for (int64_t e = 0; e < d; ++e) dp += dov[qi + e] * blk.VTilde(kt, kv, e);
          const double ds = p * (dp - delta) * blk.scale;
          for (int64_t e = 0; e < d; ++e) {
            dq[qi + e] += ds * blk.KTilde(kt, kv, e);
            dk[ki + e] += ds * blk.QTilde(qt, head, e);
            dv[ki + e] += p * dov[qi + e];
          }
        }
      }
    }
  }

  // q~ = tau^q RoPE(u): dtau^q = RoPE(u) . dq~, du (direct) = RoPE^T(tau^q dq~).
  Tensor dtau_q = Zeros({nq, h}), drope_u = Zeros(inputs.u.shape()), du = Zeros(inputs.u.shape());
  for (int64_t qt = 0; qt < nq; ++qt) {
    for (int64_t head = 0; head < h; ++head) {
      const double tau = blk.tau_q.data<double>()[qt * h + head];
      double dtau = 0;
      for (int64_t e = 0; e < d; ++e) {
        const int64_t i = (qt * h + head) * d + e;
        dtau += blk.rope_u.data<double>()[i] * dq[i];
        drope_u.data<double>()[i] = tau * dq[i];
      }
      dtau_q.data<double>()[qt * h + head] = dtau;
    }
  }
  ops::RopeBackward(Cpu(), drope_u, inputs.query_positions, inputs.inv_freq, du,
                    inputs.rope_attention_factor);
  AddInto(grads.du, du);

  // k~ = RoPE(k): dk = RoPE^T(dk~).
  Tensor dk_tilde = Zeros(inputs.k.shape()), dk_direct = Zeros(inputs.k.shape());
  std::copy(dk.begin(), dk.end(), dk_tilde.data<double>());
  ops::RopeBackward(Cpu(), dk_tilde, blk.key_positions, inputs.inv_freq, dk_direct,
                    inputs.rope_attention_factor);
  AddInto(grads.dk, dk_direct);

  // v~ = tau^v v: dtau^v = v . dv~, dv (direct) = tau^v dv~.
  Tensor dtau_v = Zeros({nk, g});
  for (int64_t kt = 0; kt < nk; ++kt) {
    for (int64_t kv = 0; kv < g; ++kv) {
      const double tau = blk.tau_v.data<double>()[kt * g + kv];
      double dtau = 0;
      for (int64_t e = 0; e < d; ++e) {
        const int64_t i = (kt * g + kv) * d + e;
        dtau += inputs.v.data<double>()[i] * dv[i];
        grads.dv.data<double>()[i] += tau * dv[i];
      }
      dtau_v.data<double>()[kt * g + kv] = dtau;
    }
  }

  // Through the temperatures into their sources (u and v themselves with weight sharing).
  Tensor& dquery_source = options.weight_sharing ? grads.du : grads.dquery_source;
  Tensor& dvalue_source = options.weight_sharing ? grads.dv : grads.dvalue_source;
  QueryTemperatureBackward(Cpu(), options, dtau_q, blk.query_source, params.query_readout,
                           params.alpha, inputs.query_positions, blk.tanh_q, dquery_source,
                           grads.params.query_readout, grads.params.alpha);
  ValueTemperatureBackward(Cpu(), options, dtau_v, blk.value_source, params.value_readout,
                           blk.tanh_v, dvalue_source, grads.params.value_readout);
}

void SsaAttentionBackward(const SsaOptions& options, const SsaBlockShape& shape, const Tensor& dout,
                          const SsaAttentionInputs& inputs, const SsaParameters& params,
                          SsaAttentionGrads& grads) {
  const int64_t nq = inputs.u.dim(0), h = inputs.u.dim(1);
  SsaAttentionOutputs forward{Zeros(inputs.u.shape()), Zeros({nq, h}), Zeros({nq, h}),
                              Zeros({inputs.k.dim(0), inputs.k.dim(1)})};
  SsaAttentionForward(options, shape, inputs, params, forward);
  for (Tensor* t : {&grads.du, &grads.dk, &grads.dv, &grads.dquery_source, &grads.dvalue_source}) {
    if (t->defined()) {
      KELVIN_CHECK(t->is_cpu() && t->dtype() == DType::kF64)
          << "ssa reference: gradients must be f64 host tensors, got " << t->ToString();
      std::fill_n(t->data<double>(), t->numel(), 0.0);
    }
  }
  SsaAttentionBlockBackward(options, shape, dout, forward.out, forward.lse, inputs, params, grads);
}

}  // namespace kelvin::ssa::reference
