// Problems for the SSA attention tests (the naive reference's and the tiled kernel's): the
// PyTorch fixtures of tools/ssa_reference.py (tests/fixtures/ssa/*.safetensors), seeded random
// problems with packed documents, the flag variants, and the token ranges of key blocks and query
// chunks. Header-only: tests/ssa/ compiles only *_test.cc files.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/copy.h"
#include "core/io/safetensors.h"
#include "core/ops/rope.h"
#include "ssa/reference/ssa_attention_reference.h"
#include "ssa/ssa_attention_args.h"
#include "ssa/ssa_options.h"
#include "tests/testing/tensors.h"

namespace kelvin::ssa::fixture {

// Everything one full-operator call needs.
struct SsaProblem {
  SsaOptions options;
  SsaBlockShape shape;
  SsaAttentionInputs in;
  SsaParameters params;
  Tensor dout;  // [N, H, d]

  int64_t n() const { return in.u.dim(0); }
  int64_t h() const { return in.u.dim(1); }
  int64_t g() const { return in.k.dim(1); }
  int64_t d() const { return in.u.dim(2); }
};

// Position ids [B*T]: 0..T-1 per row, or documents of lengths 3, 4, 5, ... (row r starts at r+3).
inline Tensor Positions(int64_t batch, int64_t seq, bool packed) {
  Tensor p = Tensor::Empty({batch * seq}, DType::kI32);
  for (int64_t row = 0; row < batch; ++row) {
    int32_t pos = 0, doc_len = static_cast<int32_t>(row + 3);
    for (int64_t i = 0; i < seq; ++i) {
      if (packed && pos == doc_len) {
        pos = 0;
        ++doc_len;
      }
      p.data<int32_t>()[row * seq + i] = pos++;
    }
  }
  return p;
}

// Default RoPE of base 10000, the problems' rotation.
inline ops::RopeConfig PlainRope() {
  ops::RopeConfig rope;
  rope.theta = 10000.0;
  return rope;
}

// Seeded uniform inputs and parameters in f64 over B rows of T tokens (the sources only without
// weight sharing).
inline SsaProblem RandomProblem(const SsaOptions& options, int64_t b, int64_t t, int64_t h,
                                int64_t g, int64_t d, bool packed, uint64_t seed) {
  const int64_t n = b * t;
  SsaProblem pr{options, SsaBlockShape::Full(b, t), {}, {}, {}};
  pr.in.u = testing::Random({n, h, d}, DType::kF64, seed + 1, -2, 2);
  pr.in.query_positions = Positions(b, t, packed);
  pr.in.k = testing::Random({n, g, d}, DType::kF64, seed + 2, -2, 2);
  pr.in.v = testing::Random({n, g, d}, DType::kF64, seed + 3);
  pr.in.inv_freq = ops::RopeInverseFrequencies(PlainRope(), d, DType::kF64);
  if (!options.weight_sharing) {
    pr.in.query_source = testing::Random({n, h, d}, DType::kF64, seed + 4, -2, 2);
    pr.in.value_source = testing::Random({n, g, d}, DType::kF64, seed + 5, -2, 2);
  }
  pr.params.query_readout = testing::Random({h, d}, DType::kF64, seed + 6, -0.8, 0.8);
  pr.params.value_readout = testing::Random({g, d}, DType::kF64, seed + 7, -0.8, 0.8);
  pr.params.alpha = testing::Random({h}, DType::kF64, seed + 8, -3, 1);
  pr.dout = testing::Random({n, h, d}, DType::kF64, seed + 9);
  return pr;
}

struct Variant {
  std::string name;
  SsaOptions options;
};

// The default options and each flag changed alone (and the clamp).
inline std::vector<Variant> Variants() {
  std::vector<Variant> v{{"default", {}}};
  auto add = [&](const std::string& name, auto change) {
    SsaOptions o;
    change(o);
    v.push_back({name, o});
  };
  add("query only", [](SsaOptions& o) { o.value_temperature = false; });
  add("value only", [](SsaOptions& o) { o.query_temperature = false; });
  add("token_aware off", [](SsaOptions& o) { o.token_aware = false; });
  add("position_aware off", [](SsaOptions& o) { o.position_aware = false; });
  add("weight_sharing off", [](SsaOptions& o) { o.weight_sharing = false; });
  add("clamp", [](SsaOptions& o) { o.temperature_clamp = TemperatureClamp{0.8, 1.5}; });
  return v;
}

// The fixture names of tests/fixtures/ssa/.
inline std::vector<std::string> FixtureNames() {
  return {"gqa_h4g2_d64",       "mqa_h4g1_d128_packed", "mha_h2g2_d16_packed",
          "query_only",         "value_only",           "token_aware_off",
          "position_aware_off", "weight_sharing_off",   "clamp"};
}

// One PyTorch fixture: its problem (floats read as `dtype`) and its expected outputs and
// gradients by name ("out", "lse", "tau_q", "tau_v", "grad.u", "grad.k", "grad.v",
// "grad.query_source", "grad.value_source", "grad.query_readout", "grad.value_readout",
// "grad.alpha"), read as f64.
class SsaFixture {
 public:
  SsaFixture(const std::string& name, DType dtype)
      : path_(std::string(KELVIN_FIXTURES_DIR) + "/ssa/" + name + ".safetensors"),
        file_(Open(path_)) {
    auto flag = [&](const std::string& key) { return Meta(key) == "true"; };
    problem_.options.query_temperature = flag("query_temperature");
    problem_.options.value_temperature = flag("value_temperature");
    problem_.options.token_aware = flag("token_aware");
    problem_.options.position_aware = flag("position_aware");
    problem_.options.weight_sharing = flag("weight_sharing");
    if (Meta("clamp_lo") != "none") {
      problem_.options.temperature_clamp =
          TemperatureClamp{std::stod(Meta("clamp_lo")), std::stod(Meta("clamp_hi"))};
    }
    problem_.shape = SsaBlockShape::Full(std::stoll(Meta("batch")), std::stoll(Meta("seq")));
    problem_.in.u = Read("u", dtype);
    problem_.in.k = Read("k", dtype);
    problem_.in.v = Read("v", dtype);
    problem_.in.query_positions = Read("positions", DType::kI32);
    problem_.in.inv_freq = Read("inv_freq", dtype);
    if (!problem_.options.weight_sharing) {
      problem_.in.query_source = Read("query_source", dtype);
      problem_.in.value_source = Read("value_source", dtype);
    }
    problem_.params = {Read("query_readout", dtype), Read("value_readout", dtype),
                       Read("alpha", dtype)};
    problem_.dout = Read("dout", dtype);
    EXPECT_EQ(problem_.h(), std::stoll(Meta("heads")));
    EXPECT_EQ(problem_.g(), std::stoll(Meta("kv_heads")));
    EXPECT_EQ(problem_.d(), std::stoll(Meta("head_dim")));
  }

  const SsaProblem& problem() const { return problem_; }
  Tensor Expected(const std::string& name) const { return Read(name, DType::kF64); }

 private:
  static io::SafetensorsFile Open(const std::string& path) {
    absl::StatusOr<io::SafetensorsFile> file = io::SafetensorsFile::Open(path);
    KELVIN_CHECK(file.ok()) << file.status().message();
    return *std::move(file);
  }
  Tensor Read(const std::string& name, DType dtype) const {
    absl::StatusOr<Tensor> t = file_.Read(name, dtype);
    KELVIN_CHECK(t.ok()) << t.status().message();
    return *t;
  }
  std::string Meta(const std::string& key) const {
    const auto it = file_.metadata().find(key);
    KELVIN_CHECK(it != file_.metadata().end()) << path_ << " has no metadata " << key;
    return it->second;
  }

  std::string path_;
  io::SafetensorsFile file_;
  SsaProblem problem_;
};

// ---- Key blocks and query chunks (ring attention) ----

// Tokens [begin, begin + count) of every row of a [B*T, ...] tensor, as [B*count, ...].
inline Tensor TokenRange(const Tensor& t, int64_t batch, int64_t begin, int64_t count) {
  if (!t.defined()) return t;
  const int64_t seq = t.dim(0) / batch;
  const size_t token_bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
  Shape shape = t.shape();
  shape[0] = batch * count;
  Tensor part = Tensor::Empty(shape, t.dtype());
  for (int64_t row = 0; row < batch; ++row) {
    std::memcpy(static_cast<char*>(part.raw_data()) + row * count * token_bytes,
                static_cast<const char*>(t.raw_data()) + (row * seq + begin) * token_bytes,
                count * token_bytes);
  }
  return part;
}

// Adds a [B*count, ...] tensor into tokens [begin, begin + count) of every row of `total` (both
// of float type T).
template <typename T>
void AddTokenRange(Tensor& total, const Tensor& part, int64_t batch, int64_t begin) {
  if (!part.defined()) return;
  const int64_t seq = total.dim(0) / batch, count = part.dim(0) / batch;
  const int64_t width = part.numel() / part.dim(0);
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t i = 0; i < count * width; ++i) {
      total.data<T>()[(row * seq + begin) * width + i] += part.data<T>()[row * count * width + i];
    }
  }
}

// The inputs of query chunk [qb, qb + qc) against key block [kb, kb + kc).
inline SsaAttentionInputs BlockInputs(const SsaProblem& pr, int64_t qb, int64_t qc, int64_t kb,
                                      int64_t kc) {
  const int64_t b = pr.shape.batch;
  const SsaAttentionInputs& in = pr.in;
  return {TokenRange(in.u, b, qb, qc),
          TokenRange(in.query_positions, b, qb, qc),
          TokenRange(in.query_source, b, qb, qc),
          TokenRange(in.k, b, kb, kc),
          TokenRange(in.v, b, kb, kc),
          TokenRange(in.query_positions, b, kb, kc),
          TokenRange(in.value_source, b, kb, kc),
          in.inv_freq,
          in.rope_attention_factor};
}

// out [Nq, H, d] and lse [Nq, H] (on ctx's device, in their dtypes) += one key block's results of
// the same queries, merged in f64 by the reference's log-sum-exp merge: how the tests compose key
// blocks into the whole operator (the model runs whole key ranges and never merges).
inline void MergeKeyBlock(const Context& ctx, Tensor& out, Tensor& lse, const Tensor& block_out,
                          const Tensor& block_lse) {
  Tensor out64 = testing::Cast(out, DType::kF64), lse64 = testing::Cast(lse, DType::kF64);
  reference::MergeAttentionBlock(out64, lse64, testing::Cast(block_out, DType::kF64),
                                 testing::Cast(block_lse, DType::kF64));
  CopyTensor(ctx, testing::Cast(out64, out.dtype()), out);
  CopyTensor(ctx, testing::Cast(lse64, lse.dtype()), lse);
}

}  // namespace kelvin::ssa::fixture
