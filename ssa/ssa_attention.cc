// The SSA attention operator's dispatcher: checks every argument (shape, dtype, device; on the CPU
// also the position ids against the masking rule) with a message naming the tensor and what was
// expected, then runs the CUDA kernels on a CUDA context and the tiled CPU kernel otherwise.
#include "ssa/ssa_attention.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "core/copy.h"
#include "core/ops/dispatch.h"
#if KELVIN_WITH_CUDNN
#include "ssa/cudnn_attention.h"
#endif

namespace kelvin::ssa {
namespace {

// The sizes every tensor of one call is checked against.
struct Dims {
  int64_t nq, nk;  // query tokens B*Tq, key tokens B*Tk
  int64_t h, g, d;
  DType dtype, accum;
};

std::string Name(const char* tensor) { return std::string("ssa_attention.") + tensor; }

void CheckTensor(const Context& ctx, const Tensor& t, const Shape& shape, DType dtype,
                 const char* name) {
  ops::CheckShape(t, shape, Name(name));
  ops::CheckDType(t, dtype, Name(name));
  ops::CheckDevice(ctx, {&t}, Name(name));
}

void CheckUndefined(const Tensor& t, const char* name, const char* why) {
  KELVIN_CHECK(!t.defined()) << Name(name) << " must be undefined " << why << ", got "
                             << t.ToString();
}

// Each query's visible keys [i - p_i, i] that lie in the key range must carry the positions
// p_i - (i - j) (the query's document). Position ids step by +1 or restart at 0, so checking the
// first and the last visible key of each query covers every key between them.
void CheckDocumentsAgree(const SsaBlockShape& s, const Tensor& query_positions,
                         const Tensor& key_positions) {
  const int32_t* qp = query_positions.data<int32_t>();
  const int32_t* kp = key_positions.data<int32_t>();
  for (int64_t row = 0; row < s.batch; ++row) {
    for (int64_t a = 0; a < s.query_count; ++a) {
      const int64_t i = s.query_begin + a, p_i = qp[row * s.query_count + a];
      const int64_t first = std::max(i - p_i, s.key_begin);
      const int64_t last = std::min(i, s.key_begin + s.key_count - 1);
      for (const int64_t j : {first, last}) {
        if (first > last) break;
        const int64_t p_j = kp[row * s.key_count + j - s.key_begin];
        KELVIN_CHECK_EQ(p_j, p_i - (i - j))
            << Name("key_positions") << ": the key at global index " << j << " of row " << row
            << " is in the document of query " << i << " (position " << p_i << ") but has position "
            << p_j;
      }
    }
  }
}

Dims CheckInputs(const Context& ctx, const SsaOptions& options, const SsaBlockShape& s,
                 const SsaAttentionInputs& in, const SsaParameters& params) {
  KELVIN_CHECK(s.batch > 0 && s.query_count > 0 && s.key_count > 0 && s.query_begin >= 0 &&
               s.key_begin >= 0)
      << "ssa_attention: block shape needs batch, query_count and key_count > 0 and begins >= 0, "
         "got batch "
      << s.batch << ", queries [" << s.query_begin << ", +" << s.query_count << "), keys ["
      << s.key_begin << ", +" << s.key_count << ")";
  KELVIN_CHECK(in.u.defined() && in.u.ndim() == 3)
      << Name("u") << " must be [Nq, H, d], got " << in.u.ToString();
  KELVIN_CHECK(in.k.defined() && in.k.ndim() == 3)
      << Name("k") << " must be [Nk, G, d], got " << in.k.ToString();
  Dims dims{s.batch * s.query_count,
            s.batch * s.key_count,
            in.u.dim(1),
            in.k.dim(1),
            in.u.dim(2),
            in.u.dtype(),
            AccumDType(in.u.dtype())};
  KELVIN_CHECK(dims.g > 0 && dims.h % dims.g == 0)
      << "ssa_attention: " << dims.h << " query heads (u " << in.u.ToString()
      << ") are not a multiple of " << dims.g << " kv heads (k " << in.k.ToString() << ")";
  KELVIN_CHECK(dims.d > 0 && dims.d % 2 == 0)
      << Name("u") << ": head dim " << dims.d << " must be even for RoPE, got " << in.u.ToString();
  if (ctx.is_cuda()) {
    KELVIN_CHECK(dims.dtype == DType::kBF16)
        << Name("u") << " is " << in.u.ToString() << ", expected dtype bf16 on CUDA";
  } else {
    KELVIN_CHECK(dims.dtype == DType::kF32 || dims.dtype == DType::kF64)
        << Name("u") << " is " << in.u.ToString() << ", expected dtype f32 or f64 on the CPU";
  }
  const Shape query_heads{dims.nq, dims.h, dims.d}, key_heads{dims.nk, dims.g, dims.d};
  CheckTensor(ctx, in.u, query_heads, dims.dtype, "u");
  CheckTensor(ctx, in.k, key_heads, dims.dtype, "k");
  CheckTensor(ctx, in.v, key_heads, dims.dtype, "v");
  CheckTensor(ctx, in.query_positions, {dims.nq}, DType::kI32, "query_positions");
  CheckTensor(ctx, in.inv_freq, {dims.d / 2}, dims.accum, "inv_freq");
  if (in.key_positions.defined()) {
    CheckTensor(ctx, in.key_positions, {dims.nk}, DType::kI32, "key_positions");
  } else {
    KELVIN_CHECK(s.query_begin == s.key_begin && s.query_count == s.key_count)
        << Name("key_positions") << " is undefined, so the keys must be the query tokens, but "
        << "queries [" << s.query_begin << ", +" << s.query_count << ") differ from keys ["
        << s.key_begin << ", +" << s.key_count << "): pass the keys' position ids";
  }
  if (in.keys_prepared) {
    CheckUndefined(in.value_source, "value_source", "with prepared keys (v already holds tau^v v)");
  }
  if (options.weight_sharing) {
    CheckUndefined(in.query_source, "query_source", "with weight sharing (u is the source)");
    CheckUndefined(in.value_source, "value_source", "with weight sharing (v is the source)");
  } else {
    if (options.query_temperature) {
      CheckTensor(ctx, in.query_source, query_heads, dims.dtype, "query_source");
    }
    if (options.value_temperature) {
      CheckTensor(ctx, in.value_source, key_heads, dims.dtype, "value_source");
    }
  }
  if (options.query_temperature) {
    CheckTensor(ctx, params.query_readout, {dims.h, dims.d}, dims.dtype, "query_readout");
    CheckTensor(ctx, params.alpha, {dims.h}, dims.dtype, "alpha");
  }
  if (options.value_temperature) {
    CheckTensor(ctx, params.value_readout, {dims.g, dims.d}, dims.dtype, "value_readout");
  }
  if (!ctx.is_cuda()) {
    const Tensor& key_positions =
        in.key_positions.defined() ? in.key_positions : in.query_positions;
    CheckPositionIds(in.query_positions, s.batch, s.query_begin, s.query_count,
                     Name("query_positions"));
    CheckPositionIds(key_positions, s.batch, s.key_begin, s.key_count, Name("key_positions"));
    CheckDocumentsAgree(s, in.query_positions, key_positions);
  }
  return dims;
}

// The attention core's options: a backend this build has, host position copies of the sides'
// lengths (CUDA calls only read them).
void CheckCoreOptions(const Context& ctx, const Dims& dims, const SsaAttentionInputs& in,
                      const AttentionCoreOptions& core) {
  if (!ctx.is_cuda()) return;
  KELVIN_CHECK(core.backend != AttentionBackend::kCudnn || CudnnCoreBuilt())
      << "ssa_attention: the CUDNN attention backend was asked for, but this build has no cuDNN "
         "core (KELVIN_CUDNN)";
  for (const auto& [host, count, name] :
       {std::tuple(&core.host_query_positions, dims.nq, "host_query_positions"),
        std::tuple(&core.host_key_positions, dims.nk, "host_key_positions")}) {
    if (!host->defined()) continue;
    ops::CheckShape(*host, {count}, Name(name));
    ops::CheckDType(*host, DType::kI32, Name(name));
    KELVIN_CHECK(host->is_cpu()) << Name(name) << " must be on the host, got " << host->ToString();
  }
  KELVIN_CHECK(!core.host_key_positions.defined() || in.key_positions.defined())
      << Name("host_key_positions") << " is set but inputs.key_positions is not";
}

// out, lse and the temperatures of this call (those of a temperature that is off are not read).
void CheckSaved(const Context& ctx, const SsaOptions& options, const Dims& dims,
                const SsaAttentionOutputs& o, const char* out_name, const char* lse_name) {
  CheckTensor(ctx, o.out, {dims.nq, dims.h, dims.d}, dims.dtype, out_name);
  CheckTensor(ctx, o.lse, {dims.nq, dims.h}, dims.accum, lse_name);
  if (options.query_temperature) {
    CheckTensor(ctx, o.query_temperature, {dims.nq, dims.h}, dims.accum, "query_temperature");
  }
  if (options.value_temperature) {
    CheckTensor(ctx, o.value_temperature, {dims.nk, dims.g}, dims.accum, "value_temperature");
  }
}

// The options the kernels run a call with: prepared keys carry tau^v in v already, so the
// operator treats the value temperature as off (v~ = v, tau^v neither read nor written).
SsaOptions KernelOptions(const SsaOptions& options, const SsaAttentionInputs& inputs) {
  SsaOptions kernel = options;
  if (inputs.keys_prepared) kernel.value_temperature = false;
  return kernel;
}

}  // namespace

void SsaAttentionForward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                         const SsaAttentionInputs& inputs, const SsaParameters& params,
                         SsaAttentionOutputs& outputs, const AttentionCoreOptions& core) {
  const SsaOptions kernel = KernelOptions(options, inputs);
  const Dims dims = CheckInputs(ctx, kernel, shape, inputs, params);
  CheckSaved(ctx, kernel, dims, outputs, "out", "lse");
  CheckCoreOptions(ctx, dims, inputs, core);
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) {
    return cuda::SsaAttentionForward(ctx, kernel, shape, inputs, params, outputs, core);
  }
#endif
  cpu::SsaAttentionForward(kernel, shape, inputs, params, outputs);
}

void PrepareKeysAndValues(const Context& ctx, const SsaOptions& options, const Tensor& k,
                          const Tensor& v, const Tensor& value_source, const Tensor& positions,
                          const Tensor& inv_freq, const Tensor& value_readout, Tensor& k_prepared,
                          Tensor& v_prepared, Tensor& tau_v, double rope_attention_factor) {
  KELVIN_CHECK(k.defined() && k.ndim() == 3)
      << Name("k") << " to prepare must be [N, G, d], got " << k.ToString();
  const int64_t n = k.dim(0), g = k.dim(1), d = k.dim(2);
  const DType dtype = k.dtype();
  KELVIN_CHECK(d % 2 == 0) << Name("k") << ": head dim " << d << " must be even for RoPE, got "
                           << k.ToString();
  KELVIN_CHECK(ctx.is_cuda() ? dtype == DType::kBF16 : dtype == DType::kF32 || dtype == DType::kF64)
      << Name("k") << " is " << k.ToString() << ", expected bf16 on CUDA, f32 or f64 on the CPU";
  const Shape heads{n, g, d};
  CheckTensor(ctx, v, heads, dtype, "v");
  CheckTensor(ctx, k_prepared, heads, dtype, "k_prepared");
  CheckTensor(ctx, v_prepared, heads, dtype, "v_prepared");
  CheckTensor(ctx, positions, {n}, DType::kI32, "positions");
  CheckTensor(ctx, inv_freq, {d / 2}, AccumDType(dtype), "inv_freq");
  if (options.value_temperature) {
    if (options.weight_sharing) {
      CheckUndefined(value_source, "value_source", "with weight sharing (v is the source)");
    } else {
      CheckTensor(ctx, value_source, heads, dtype, "value_source");
    }
    CheckTensor(ctx, value_readout, {g, d}, dtype, "value_readout");
    CheckTensor(ctx, tau_v, {n, g}, AccumDType(dtype), "value_temperature");
  }
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) {
    return cuda::PrepareKeysAndValues(ctx, options, k, v, value_source, positions, inv_freq,
                                      value_readout, k_prepared, v_prepared, tau_v,
                                      rope_attention_factor);
  }
#endif
  cpu::PrepareKeysAndValues(options, k, v, value_source, positions, inv_freq, value_readout,
                            k_prepared, v_prepared, tau_v, rope_attention_factor);
}

void SsaAttentionBackward(const Context& ctx, const SsaOptions& options, const SsaBlockShape& shape,
                          const Tensor& dout, const SsaAttentionInputs& inputs,
                          const SsaParameters& params, const SsaAttentionOutputs& saved,
                          SsaAttentionGrads& grads, const AttentionCoreOptions& core) {
  // Frozen SSA parameters (an undefined gradient beside a defined parameter): the kernels compute
  // their gradients with the rest, here into discarded scratch.
  SsaAttentionGrads with_scratch = grads;  // handles: the other gradients reach the caller's
  bool scratch = false;
  SsaParameters& d = with_scratch.params;
  for (auto [value, gradient] :
       {std::pair{&params.query_readout, &d.query_readout},
        std::pair{&params.value_readout, &d.value_readout}, std::pair{&params.alpha, &d.alpha}}) {
    if (value->defined() && !gradient->defined()) {
      *gradient = Zeros(ctx, value->shape(), AccumDType(value->dtype()));
      scratch = true;
    }
  }
  if (scratch) {
    return SsaAttentionBackward(ctx, options, shape, dout, inputs, params, saved, with_scratch,
                                core);
  }
  KELVIN_CHECK(!inputs.keys_prepared)
      << "ssa_attention: the backward needs the keys and values as projected (keys_prepared is "
         "forward only)";
  const Dims dims = CheckInputs(ctx, options, shape, inputs, params);
  CheckCoreOptions(ctx, dims, inputs, core);
  const Shape query_heads{dims.nq, dims.h, dims.d}, key_heads{dims.nk, dims.g, dims.d};
  CheckTensor(ctx, dout, query_heads, dims.dtype, "dout");
  CheckSaved(ctx, options, dims, saved, "saved.out", "saved.lse");
  CheckTensor(ctx, grads.du, query_heads, dims.dtype, "du");
  CheckTensor(ctx, grads.dk, key_heads, dims.dtype, "dk");
  CheckTensor(ctx, grads.dv, key_heads, dims.dtype, "dv");
  if (options.weight_sharing) {
    CheckUndefined(grads.dquery_source, "dquery_source", "with weight sharing (it goes into du)");
    CheckUndefined(grads.dvalue_source, "dvalue_source", "with weight sharing (it goes into dv)");
  } else {
    if (options.query_temperature) {
      CheckTensor(ctx, grads.dquery_source, query_heads, dims.dtype, "dquery_source");
    }
    if (options.value_temperature) {
      CheckTensor(ctx, grads.dvalue_source, key_heads, dims.dtype, "dvalue_source");
    }
  }
  if (options.query_temperature) {
    CheckTensor(ctx, grads.params.query_readout, {dims.h, dims.d}, dims.accum, "d query_readout");
    CheckTensor(ctx, grads.params.alpha, {dims.h}, dims.accum, "d alpha");
  }
  if (options.value_temperature) {
    CheckTensor(ctx, grads.params.value_readout, {dims.g, dims.d}, dims.accum, "d value_readout");
  }
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) {
    return cuda::SsaAttentionBackward(ctx, options, shape, dout, inputs, params, saved, grads,
                                      core);
  }
#endif
  cpu::SsaAttentionBackward(options, shape, dout, inputs, params, saved, grads);
}

bool CudaSupportsHeadDim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

std::string CudnnCoreUnavailableReason(const Context& ctx) {
#if KELVIN_WITH_CUDNN
  return cudnn_core::UnavailableReason(ctx);
#else
  (void)ctx;
  return "this build has no cuDNN attention core (configured with KELVIN_CUDNN off, or without "
         "CUDA, cudnn.h or the cuDNN frontend: scripts/setup.sh fetches the frontend)";
#endif
}

void CheckPositionIds(const Tensor& positions, int64_t batch, int64_t begin, int64_t count,
                      const std::string& name) {
  const int32_t* p = positions.data<int32_t>();
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t a = 0; a < count; ++a) {
      const int32_t pos = p[row * count + a];
      const bool ok =
          a == 0 ? pos >= 0 && pos <= begin : pos == 0 || pos == p[row * count + a - 1] + 1;
      KELVIN_CHECK(ok) << name << "[" << row * count + a << "] = " << pos << " at global index "
                       << begin + a
                       << ": position ids must restart at 0 or count up by one within a row";
    }
  }
}

}  // namespace kelvin::ssa
