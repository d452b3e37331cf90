// The tiled CPU SSA attention operator (ssa/ssa_attention.h) in f32 and f64: equal to the naive f64
// reference on odd shapes and under every flag, and to the PyTorch fixtures in f32; merged key
// blocks equal the full operator; f64 finite differences of every input and parameter;
// bit-identical to vanilla attention when every temperature is exactly 1; gradients accumulate;
// bad arguments are refused by name.
#include "ssa/ssa_attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/ops/dispatch.h"
#include "ssa/reference/ssa_attention_reference.h"
#include "tests/ssa/ssa_fixture.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::ssa {
namespace {

using fixture::SsaProblem;
using ::testing::HasSubstr;

const Context& Cpu() { return testing::ContextFor(Device::Cpu()); }

Tensor Zeros(const Shape& shape, DType dtype) { return Tensor::ZerosCpu(shape, dtype); }

SsaAttentionOutputs NewOutputs(int64_t nq, int64_t nk, int64_t h, int64_t g, int64_t d,
                               DType dtype) {
  const DType accum = AccumDType(dtype);
  return {Zeros({nq, h, d}, dtype), Zeros({nq, h}, accum), Zeros({nq, h}, accum),
          Zeros({nk, g}, accum)};
}

// Zero gradients; the source gradients exist only without weight sharing.
SsaAttentionGrads NewGrads(const SsaOptions& options, int64_t nq, int64_t nk, int64_t h, int64_t g,
                           int64_t d, DType dtype) {
  const DType accum = AccumDType(dtype);
  SsaAttentionGrads grads{Zeros({nq, h, d}, dtype),
                          Zeros({nk, g, d}, dtype),
                          Zeros({nk, g, d}, dtype),
                          {},
                          {},
                          {Zeros({h, d}, accum), Zeros({g, d}, accum), Zeros({h}, accum)}};
  if (!options.weight_sharing) {
    grads.dquery_source = Zeros({nq, h, d}, dtype);
    grads.dvalue_source = Zeros({nk, g, d}, dtype);
  }
  return grads;
}

// The problem with every float tensor in `dtype` (f64 -> f32 rounds; the reference then gets the
// f64 copies of the rounded values through Cast(.., kF64)).
SsaProblem CastProblem(const SsaProblem& pr, DType dtype) {
  auto cast = [&](const Tensor& t) { return t.defined() ? testing::Cast(t, dtype) : t; };
  SsaProblem out = pr;
  for (Tensor* t : {&out.in.u, &out.in.k, &out.in.v, &out.in.query_source, &out.in.value_source,
                    &out.in.inv_freq, &out.params.query_readout, &out.params.value_readout,
                    &out.params.alpha, &out.dout}) {
    *t = cast(*t);
  }
  return out;
}

DType DTypeOfProblem(const SsaProblem& pr) { return pr.in.u.dtype(); }

// The tiled operator on a full problem, or on its block `shape` with `inputs`.
SsaAttentionOutputs TiledForward(const SsaProblem& pr, const SsaBlockShape& shape,
                                 const SsaAttentionInputs& inputs) {
  SsaAttentionOutputs out =
      NewOutputs(inputs.u.dim(0), inputs.k.dim(0), pr.h(), pr.g(), pr.d(), DTypeOfProblem(pr));
  SsaAttentionForward(Cpu(), pr.options, shape, inputs, pr.params, out);
  return out;
}
SsaAttentionOutputs TiledForward(const SsaProblem& pr) { return TiledForward(pr, pr.shape, pr.in); }

SsaAttentionGrads TiledBackward(const SsaProblem& pr, const SsaAttentionOutputs& saved) {
  SsaAttentionGrads grads =
      NewGrads(pr.options, pr.n(), pr.n(), pr.h(), pr.g(), pr.d(), DTypeOfProblem(pr));
  SsaAttentionBackward(Cpu(), pr.options, pr.shape, pr.dout, pr.in, pr.params, saved, grads);
  return grads;
}

// The naive f64 reference on the f64 copy of the problem.
struct ReferenceResult {
  SsaAttentionOutputs out;
  SsaAttentionGrads grads;
};

ReferenceResult Reference(const SsaProblem& pr) {
  const SsaProblem pr64 = CastProblem(pr, DType::kF64);
  ReferenceResult r{NewOutputs(pr.n(), pr.n(), pr.h(), pr.g(), pr.d(), DType::kF64),
                    NewGrads(pr.options, pr.n(), pr.n(), pr.h(), pr.g(), pr.d(), DType::kF64)};
  reference::SsaAttentionForward(pr64.options, pr64.shape, pr64.in, pr64.params, r.out);
  reference::SsaAttentionBackward(pr64.options, pr64.shape, pr64.dout, pr64.in, pr64.params,
                                  r.grads);
  return r;
}

// The tiled operator's outputs against `expected`; the temperatures only where they are on.
void ExpectOutputsClose(const SsaOptions& options, const SsaAttentionOutputs& out,
                        const SsaAttentionOutputs& expected, double tol) {
  EXPECT_TRUE(testing::AllClose(out.out, expected.out, tol, "out"));
  EXPECT_TRUE(testing::AllClose(out.lse, expected.lse, tol, "lse"));
  if (options.query_temperature) {
    EXPECT_TRUE(testing::AllClose(out.query_temperature, expected.query_temperature, tol, "tau_q"));
  }
  if (options.value_temperature) {
    EXPECT_TRUE(testing::AllClose(out.value_temperature, expected.value_temperature, tol, "tau_v"));
  }
}

// Every gradient against `expected`; a temperature's parameters and sources only where it is on.
void ExpectGradsClose(const SsaOptions& options, const SsaAttentionGrads& grads,
                      const SsaAttentionGrads& expected, double tol) {
  EXPECT_TRUE(testing::AllClose(grads.du, expected.du, tol, "du"));
  EXPECT_TRUE(testing::AllClose(grads.dk, expected.dk, tol, "dk"));
  EXPECT_TRUE(testing::AllClose(grads.dv, expected.dv, tol, "dv"));
  if (options.query_temperature) {
    EXPECT_TRUE(testing::AllClose(grads.params.query_readout, expected.params.query_readout, tol,
                                  "d query_readout"));
    EXPECT_TRUE(testing::AllClose(grads.params.alpha, expected.params.alpha, tol, "d alpha"));
    if (!options.weight_sharing) {
      EXPECT_TRUE(
          testing::AllClose(grads.dquery_source, expected.dquery_source, tol, "dquery_source"));
    }
  }
  if (options.value_temperature) {
    EXPECT_TRUE(testing::AllClose(grads.params.value_readout, expected.params.value_readout, tol,
                                  "d value_readout"));
    if (!options.weight_sharing) {
      EXPECT_TRUE(
          testing::AllClose(grads.dvalue_source, expected.dvalue_source, tol, "dvalue_source"));
    }
  }
}

void ExpectMatchesReference(const SsaProblem& pr) {
  const SsaAttentionOutputs out = TiledForward(pr);
  const SsaAttentionGrads grads = TiledBackward(pr, out);
  const ReferenceResult ref = Reference(pr);
  const double tol = testing::RelTolerance(DTypeOfProblem(pr));
  ExpectOutputsClose(pr.options, out, ref.out, tol);
  ExpectGradsClose(pr.options, grads, ref.grads, tol);
}

class SsaAttentionCpu : public ::testing::TestWithParam<DType> {};

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return std::string(DTypeName(info.param));
}

// ---- Against the naive reference ----

// T = 1, 37, 70, 130 against tiles of 64 or 128 query tokens and 128 keys; GQA, MQA, MHA; d 16 to
// 128; packed documents.
TEST_P(SsaAttentionCpu, MatchesTheReferenceOnOddShapes) {
  struct Case {
    int64_t b, t, h, g, d;
    bool packed;
  };
  const Case cases[] = {
      {1, 1, 4, 2, 16, false},     // one token
      {1, 37, 4, 2, 64, false},    // less than one tile
      {2, 130, 4, 2, 16, true},    // two query and key tiles, the last of 2 tokens; documents
      {1, 130, 4, 1, 128, false},  // MQA, d 128: three query tiles of 64, 64 and 2 tokens
      {2, 70, 2, 2, 32, true},     // MHA
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.b << " T " << c.t << " H " << c.h << " G " << c.g
                                      << " d " << c.d << " packed " << c.packed);
    ExpectMatchesReference(CastProblem(
        fixture::RandomProblem(SsaOptions{}, c.b, c.t, c.h, c.g, c.d, c.packed, 40), GetParam()));
  }
}

TEST_P(SsaAttentionCpu, EveryFlagVariantMatchesTheReference) {
  for (const fixture::Variant& variant : fixture::Variants()) {
    SCOPED_TRACE(variant.name);
    ExpectMatchesReference(CastProblem(
        fixture::RandomProblem(variant.options, 2, 70, 4, 2, 16, /*packed=*/true, 60), GetParam()));
  }
}

// ---- SSA reduces to vanilla attention ----

TEST_P(SsaAttentionCpu, UnitTemperaturesAreBitIdenticalToVanillaAttention) {
  SsaOptions options;
  options.position_aware = false;
  SsaProblem ssa = CastProblem(
      fixture::RandomProblem(options, 2, 130, 4, 2, 64, /*packed=*/true, 70), GetParam());
  ssa.params.query_readout = Zeros(ssa.params.query_readout.shape(), GetParam());
  ssa.params.value_readout = Zeros(ssa.params.value_readout.shape(), GetParam());
  SsaProblem vanilla = ssa;
  vanilla.options = VanillaAttentionOptions();
  vanilla.params = {};  // a temperature that is off reads no parameter
  const SsaAttentionOutputs ssa_out = TiledForward(ssa);
  const SsaAttentionGrads ssa_grads = TiledBackward(ssa, ssa_out);
  const SsaAttentionOutputs vanilla_out = TiledForward(vanilla);
  const SsaAttentionGrads vanilla_grads = TiledBackward(vanilla, vanilla_out);
  const DType accum = AccumDType(GetParam());
  EXPECT_TRUE(testing::BitIdentical(ssa_out.query_temperature,
                                    testing::Full({ssa.n(), ssa.h()}, accum, 1), "tau_q"));
  EXPECT_TRUE(testing::BitIdentical(ssa_out.value_temperature,
                                    testing::Full({ssa.n(), ssa.g()}, accum, 1), "tau_v"));
  EXPECT_TRUE(testing::BitIdentical(ssa_out.out, vanilla_out.out, "out"));
  EXPECT_TRUE(testing::BitIdentical(ssa_out.lse, vanilla_out.lse, "lse"));
  EXPECT_TRUE(testing::BitIdentical(ssa_grads.du, vanilla_grads.du, "du"));
  EXPECT_TRUE(testing::BitIdentical(ssa_grads.dk, vanilla_grads.dk, "dk"));
  EXPECT_TRUE(testing::BitIdentical(ssa_grads.dv, vanilla_grads.dv, "dv"));
  // And vanilla attention is the reference's (temperatures off) within the dtype's tolerance.
  SsaProblem reference_problem = vanilla;  // the reference reads the (unused) parameters
  reference_problem.params = ssa.params;
  const ReferenceResult ref = Reference(reference_problem);
  ExpectOutputsClose(vanilla.options, vanilla_out, ref.out, testing::RelTolerance(GetParam()));
  ExpectGradsClose(vanilla.options, vanilla_grads, ref.grads, testing::RelTolerance(GetParam()));
}

TEST_P(SsaAttentionCpu, GradientsAccumulate) {
  const SsaProblem pr = CastProblem(
      fixture::RandomProblem(SsaOptions{}, 1, 40, 4, 2, 16, /*packed=*/true, 80), GetParam());
  const SsaAttentionOutputs out = TiledForward(pr);
  const SsaAttentionGrads once = TiledBackward(pr, out);
  SsaAttentionGrads twice = TiledBackward(pr, out);
  SsaAttentionBackward(Cpu(), pr.options, pr.shape, pr.dout, pr.in, pr.params, out, twice);
  for (auto [a, b, name] :
       {std::tuple{&twice.du, &once.du, "du"}, std::tuple{&twice.dk, &once.dk, "dk"},
        std::tuple{&twice.dv, &once.dv, "dv"},
        std::tuple{&twice.params.query_readout, &once.params.query_readout, "d query_readout"},
        std::tuple{&twice.params.value_readout, &once.params.value_readout, "d value_readout"},
        std::tuple{&twice.params.alpha, &once.params.alpha, "d alpha"}}) {
    const Tensor doubled = testing::Cast(*b, DType::kF64);
    for (int64_t i = 0; i < doubled.numel(); ++i) doubled.data<double>()[i] *= 2;
    EXPECT_TRUE(testing::AllClose(*a, doubled, testing::RelTolerance(GetParam()), name));
  }
}

// ---- Key blocks and query chunks (ring attention) ----

// Key blocks with query chunks, merged by log-sum-exp, equal the full operator, forward and
// backward.
TEST_P(SsaAttentionCpu, MergedKeyBlocksEqualTheFullOperator) {
  const DType dtype = GetParam(), accum = AccumDType(dtype);
  const double forward_tol = dtype == DType::kF64 ? testing::kF64RelTol : 1e-6;
  const double backward_tol = testing::RelTolerance(dtype);
  const std::vector<std::vector<int64_t>> key_splits = {
      {0, 64, 130}, {0, 40, 90, 130}, {0, 1, 65, 100, 130}};
  const std::vector<std::vector<int64_t>> query_splits = {{0, 130}, {0, 70, 130}};
  SsaOptions no_sharing;
  no_sharing.weight_sharing = false;
  no_sharing.temperature_clamp = TemperatureClamp{0.8, 1.5};
  for (const SsaOptions& options : {SsaOptions{}, no_sharing}) {
    const SsaProblem pr =
        CastProblem(fixture::RandomProblem(options, 2, 130, 4, 2, 16, /*packed=*/true, 90), dtype);
    const int64_t b = pr.shape.batch, h = pr.h(), g = pr.g(), d = pr.d();
    const SsaAttentionOutputs full = TiledForward(pr);
    const SsaAttentionGrads full_grads = TiledBackward(pr, full);
    for (const std::vector<int64_t>& keys : key_splits) {
      for (const std::vector<int64_t>& queries : query_splits) {
        SCOPED_TRACE(::testing::Message()
                     << "weight_sharing=" << options.weight_sharing << ", " << keys.size() - 1
                     << " key blocks, " << queries.size() - 1 << " query chunks");
        SsaAttentionGrads total = NewGrads(options, pr.n(), pr.n(), h, g, d, dtype);
        for (size_t qi = 0; qi + 1 < queries.size(); ++qi) {
          const int64_t qb = queries[qi], qc = queries[qi + 1] - qb;
          SsaAttentionOutputs merged{
              Zeros({b * qc, h, d}, dtype), testing::Full({b * qc, h}, accum, -INFINITY), {}, {}};
          std::vector<SsaAttentionOutputs> parts;
          for (size_t ki = 0; ki + 1 < keys.size(); ++ki) {
            const int64_t kb = keys[ki], kc = keys[ki + 1] - kb;
            parts.push_back(
                TiledForward(pr, {b, qb, qc, kb, kc}, fixture::BlockInputs(pr, qb, qc, kb, kc)));
            fixture::MergeKeyBlock(Cpu(), merged.out, merged.lse, parts.back().out,
                                   parts.back().lse);
          }
          EXPECT_TRUE(testing::AllClose(merged.out, fixture::TokenRange(full.out, b, qb, qc),
                                        forward_tol, "merged out"));
          EXPECT_TRUE(testing::AllClose(merged.lse, fixture::TokenRange(full.lse, b, qb, qc),
                                        forward_tol, "merged lse"));
          const Tensor dout = fixture::TokenRange(pr.dout, b, qb, qc);
          for (size_t ki = 0; ki + 1 < keys.size(); ++ki) {
            const int64_t kb = keys[ki], kc = keys[ki + 1] - kb;
            SsaAttentionOutputs saved = parts[ki];
            saved.out = merged.out;
            saved.lse = merged.lse;
            SsaAttentionGrads part = NewGrads(options, b * qc, b * kc, h, g, d, dtype);
            part.params = total.params;  // parameter gradients accumulate in place
            SsaAttentionBackward(Cpu(), options, {b, qb, qc, kb, kc}, dout,
                                 fixture::BlockInputs(pr, qb, qc, kb, kc), pr.params, saved, part);
            ops::DispatchCpuFloat(dtype, "AddTokenRange", [&]<typename T>() {
              fixture::AddTokenRange<T>(total.du, part.du, b, qb);
              fixture::AddTokenRange<T>(total.dquery_source, part.dquery_source, b, qb);
              fixture::AddTokenRange<T>(total.dk, part.dk, b, kb);
              fixture::AddTokenRange<T>(total.dv, part.dv, b, kb);
              fixture::AddTokenRange<T>(total.dvalue_source, part.dvalue_source, b, kb);
            });
          }
        }
        ExpectGradsClose(options, total, full_grads, backward_tol);
      }
    }
  }
}

TEST_P(SsaAttentionCpu, ABlockAQueryCannotSeeGivesZeroAndMinusInfinityAndMergesToNothing) {
  const DType dtype = GetParam();
  const SsaProblem pr =
      CastProblem(fixture::RandomProblem(SsaOptions{}, 2, 8, 2, 1, 4, false, 900), dtype);
  const int64_t b = pr.shape.batch;
  // Queries [0, 4) against keys [4, 8): all in the future.
  const SsaAttentionOutputs future =
      TiledForward(pr, {b, 0, 4, 4, 4}, fixture::BlockInputs(pr, 0, 4, 4, 4));
  EXPECT_TRUE(testing::BitIdentical(future.out, Zeros(future.out.shape(), dtype), "out"));
  EXPECT_TRUE(testing::BitIdentical(
      future.lse, testing::Full(future.lse.shape(), AccumDType(dtype), -INFINITY), "lse"));
  const SsaAttentionOutputs past =
      TiledForward(pr, {b, 0, 4, 0, 4}, fixture::BlockInputs(pr, 0, 4, 0, 4));
  Tensor out = testing::Cast(past.out, dtype), lse = testing::Cast(past.lse, AccumDType(dtype));
  fixture::MergeKeyBlock(Cpu(), out, lse, future.out, future.lse);
  EXPECT_TRUE(testing::BitIdentical(out, past.out, "merged out"));
  EXPECT_TRUE(testing::BitIdentical(lse, past.lse, "merged lse"));
}

// ---- Keys prepared once (a decoder's cache) ----

// k~ and v~ written by PrepareKeysAndValues (in place, as the decoder does), then a forward that
// takes them as they are, equal the operator's own forward bit for bit under every flag: the
// out, lse and tau^q of a query chunk against all keys, and tau^v of the keys.
TEST_P(SsaAttentionCpu, PreparedKeysGiveTheSameResultsBitForBit) {
  const DType dtype = GetParam(), accum = AccumDType(dtype);
  for (const fixture::Variant& variant : fixture::Variants()) {
    SCOPED_TRACE(variant.name);
    const SsaProblem pr = CastProblem(
        fixture::RandomProblem(variant.options, 2, 150, 4, 2, 16, /*packed=*/true, 95), dtype);
    const int64_t b = pr.shape.batch, n = pr.n();
    const SsaAttentionInputs chunk = fixture::BlockInputs(pr, 130, 20, 0, 150);
    const SsaAttentionOutputs expected = TiledForward(pr, {b, 130, 20, 0, 150}, chunk);

    SsaAttentionInputs prepared = chunk;
    prepared.k = testing::Cast(chunk.k, dtype);  // copies, rewritten in place
    prepared.v = testing::Cast(chunk.v, dtype);
    Tensor tau_v = Zeros({n, pr.g()}, accum);
    PrepareKeysAndValues(Cpu(), pr.options, prepared.k, prepared.v, chunk.value_source,
                         chunk.key_positions, chunk.inv_freq, pr.params.value_readout, prepared.k,
                         prepared.v, tau_v);
    prepared.value_source = Tensor();
    prepared.keys_prepared = true;
    SsaAttentionOutputs out = NewOutputs(b * 20, n, pr.h(), pr.g(), pr.d(), dtype);
    out.value_temperature = Tensor();  // not written for prepared keys
    SsaAttentionForward(Cpu(), pr.options, {b, 130, 20, 0, 150}, prepared, pr.params, out);
    EXPECT_TRUE(testing::BitIdentical(out.out, expected.out, "out"));
    EXPECT_TRUE(testing::BitIdentical(out.lse, expected.lse, "lse"));
    if (pr.options.query_temperature) {
      EXPECT_TRUE(
          testing::BitIdentical(out.query_temperature, expected.query_temperature, "tau_q"));
    }
    if (pr.options.value_temperature) {
      EXPECT_TRUE(testing::BitIdentical(tau_v, expected.value_temperature, "tau_v"));
    } else {
      EXPECT_TRUE(testing::BitIdentical(prepared.v, chunk.v, "v~ = v"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SsaAttentionCpu, ::testing::Values(DType::kF32, DType::kF64),
                         DTypeParamName);

// ---- Parity with the PyTorch fixtures, in f32 ----

class SsaAttentionCpuFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(SsaAttentionCpuFixture, F32MatchesPyTorch) {
  const fixture::SsaFixture file(GetParam(), DType::kF32);
  const SsaProblem& pr = file.problem();
  const SsaAttentionOutputs out = TiledForward(pr);
  const SsaAttentionGrads grads = TiledBackward(pr, out);
  const SsaAttentionOutputs expected_out{file.Expected("out"), file.Expected("lse"),
                                         file.Expected("tau_q"), file.Expected("tau_v")};
  SsaAttentionGrads expected{file.Expected("grad.u"),
                             file.Expected("grad.k"),
                             file.Expected("grad.v"),
                             {},
                             {},
                             {file.Expected("grad.query_readout"),
                              file.Expected("grad.value_readout"), file.Expected("grad.alpha")}};
  if (!pr.options.weight_sharing) {
    expected.dquery_source = file.Expected("grad.query_source");
    expected.dvalue_source = file.Expected("grad.value_source");
  }
  ExpectOutputsClose(pr.options, out, expected_out, testing::kF32RelTol);
  ExpectGradsClose(pr.options, grads, expected, testing::kF32RelTol);
}

INSTANTIATE_TEST_SUITE_P(Cases, SsaAttentionCpuFixture,
                         ::testing::ValuesIn(fixture::FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// ---- Finite differences of the tiled path (f64) ----

void ExpectGradientsMatchFiniteDifferences(SsaProblem& pr) {
  const SsaAttentionGrads grads = TiledBackward(pr, TiledForward(pr));
  auto loss = [&] { return testing::Dot(pr.dout, TiledForward(pr).out); };
  EXPECT_TRUE(testing::GradientMatches(loss, pr.in.u, grads.du, "du"));
  EXPECT_TRUE(testing::GradientMatches(loss, pr.in.k, grads.dk, "dk"));
  EXPECT_TRUE(testing::GradientMatches(loss, pr.in.v, grads.dv, "dv"));
  if (!pr.options.weight_sharing) {
    if (pr.options.query_temperature) {
      EXPECT_TRUE(
          testing::GradientMatches(loss, pr.in.query_source, grads.dquery_source, "dquery_source"));
    }
    if (pr.options.value_temperature) {
      EXPECT_TRUE(
          testing::GradientMatches(loss, pr.in.value_source, grads.dvalue_source, "dvalue_source"));
    }
  }
  if (pr.options.query_temperature) {
    EXPECT_TRUE(testing::GradientMatches(loss, pr.params.query_readout, grads.params.query_readout,
                                         "d query_readout"));
    EXPECT_TRUE(testing::GradientMatches(loss, pr.params.alpha, grads.params.alpha, "d alpha"));
  }
  if (pr.options.value_temperature) {
    EXPECT_TRUE(testing::GradientMatches(loss, pr.params.value_readout, grads.params.value_readout,
                                         "d value_readout"));
  }
}

TEST(SsaAttentionCpuGradient, AcrossTilesMatchesFiniteDifferences) {
  // 130 tokens, H/G = 2: two query tiles and two key tiles, documents crossing their borders.
  SsaProblem pr = fixture::RandomProblem(SsaOptions{}, 1, 130, 2, 1, 2, /*packed=*/true, 110);
  ExpectGradientsMatchFiniteDifferences(pr);
}

TEST(SsaAttentionCpuGradient, EveryFlagVariantMatchesFiniteDifferences) {
  for (const fixture::Variant& variant : fixture::Variants()) {
    SCOPED_TRACE(variant.name);
    SsaProblem pr = fixture::RandomProblem(variant.options, 2, 7, 4, 2, 4, /*packed=*/true, 120);
    ExpectGradientsMatchFiniteDifferences(pr);
  }
}

// ---- Argument checks ----

TEST(SsaAttentionCpuDeathTest, AWrongShapeIsRefusedByName) {
  const SsaProblem pr =
      CastProblem(fixture::RandomProblem(SsaOptions{}, 1, 5, 4, 2, 8, false, 1), DType::kF32);
  SsaAttentionInputs in = pr.in;
  in.v = Zeros({5, 2, 6}, DType::kF32);
  SsaAttentionOutputs out = NewOutputs(5, 5, 4, 2, 8, DType::kF32);
  EXPECT_DEATH(SsaAttentionForward(Cpu(), pr.options, pr.shape, in, pr.params, out),
               "ssa_attention.v is f32\\[5, 2, 6\\]@cpu, expected shape \\[5, 2, 8\\]");
}

TEST(SsaAttentionCpuDeathTest, AWrongDtypeIsRefusedByName) {
  const SsaProblem pr =
      CastProblem(fixture::RandomProblem(SsaOptions{}, 1, 5, 4, 2, 8, false, 1), DType::kF32);
  SsaAttentionOutputs out = NewOutputs(5, 5, 4, 2, 8, DType::kF32);
  out.lse = Zeros({5, 4}, DType::kF64);
  EXPECT_DEATH(SsaAttentionForward(Cpu(), pr.options, pr.shape, pr.in, pr.params, out),
               "ssa_attention.lse is f64\\[5, 4\\]@cpu, expected dtype f32");
}

TEST(SsaAttentionCpuDeathTest, KeyPositionsOfAnotherDocumentAreRefused) {
  const SsaProblem pr =
      CastProblem(fixture::RandomProblem(SsaOptions{}, 1, 6, 2, 1, 4, false, 1), DType::kF32);
  SsaAttentionInputs in = fixture::BlockInputs(pr, 3, 3, 0, 3);
  in.key_positions.data<int32_t>()[1] = 0;  // key 1 restarts a document query 3 sees from key 0
  in.key_positions.data<int32_t>()[2] = 1;
  SsaAttentionOutputs out = NewOutputs(3, 3, 2, 1, 4, DType::kF32);
  EXPECT_DEATH(SsaAttentionForward(Cpu(), pr.options, {1, 3, 3, 0, 3}, in, pr.params, out),
               "ssa_attention.key_positions: the key at global index 2 of row 0 is in the "
               "document of query 3");
}

TEST(SsaAttentionCpuDeathTest, MissingKeyPositionsOfAKeyBlockAreRefused) {
  const SsaProblem pr =
      CastProblem(fixture::RandomProblem(SsaOptions{}, 1, 6, 2, 1, 4, false, 1), DType::kF32);
  SsaAttentionInputs in = fixture::BlockInputs(pr, 3, 3, 0, 3);
  in.key_positions = Tensor();
  SsaAttentionOutputs out = NewOutputs(3, 3, 2, 1, 4, DType::kF32);
  EXPECT_DEATH(SsaAttentionForward(Cpu(), pr.options, {1, 3, 3, 0, 3}, in, pr.params, out),
               "ssa_attention.key_positions is undefined, so the keys must be the query tokens");
}

TEST(SsaAttentionCpuDeathTest, PreparedKeysAreForwardOnlyAndTakeNoValueSource) {
  SsaOptions options;
  options.weight_sharing = false;
  const SsaProblem pr =
      CastProblem(fixture::RandomProblem(options, 1, 5, 4, 2, 8, false, 1), DType::kF32);
  SsaAttentionInputs in = pr.in;
  in.keys_prepared = true;
  SsaAttentionOutputs out = NewOutputs(5, 5, 4, 2, 8, DType::kF32);
  EXPECT_DEATH(SsaAttentionForward(Cpu(), pr.options, pr.shape, in, pr.params, out),
               "ssa_attention.value_source must be undefined with prepared keys");
  SsaAttentionGrads grads = NewGrads(options, 5, 5, 4, 2, 8, DType::kF32);
  EXPECT_DEATH(
      SsaAttentionBackward(Cpu(), pr.options, pr.shape, pr.dout, in, pr.params, out, grads),
      "the backward needs the keys and values as projected");
}

}  // namespace
}  // namespace kelvin::ssa
