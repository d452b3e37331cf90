// The naive SSA attention reference: equal to the independent PyTorch implementation
// (tools/ssa_reference.py) on every output and gradient; its backward against f64 finite
// differences for every input and parameter under each flag; with zero read-outs and no position
// term equal to plain attention on RoPE'd inputs (docs/ssa.md); and key blocks (with query
// chunks) merged by log-sum-exp equal to the full operator, forward and backward.
#include "ssa/reference/ssa_attention_reference.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "core/ops/reference/attention.h"
#include "core/ops/reference/rope.h"
#include "tests/ssa/ssa_fixture.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::ssa {
namespace {

constexpr double kFixtureRelTol = testing::kF64RelTol;  // two f64 implementations

Tensor Zeros(const Shape& shape) { return Tensor::ZerosCpu(shape, DType::kF64); }

SsaAttentionOutputs NewOutputs(int64_t nq, int64_t nk, int64_t h, int64_t g, int64_t d) {
  return {Zeros({nq, h, d}), Zeros({nq, h}), Zeros({nq, h}), Zeros({nk, g})};
}

// Zero gradients; the source gradients exist only without weight sharing.
SsaAttentionGrads NewGrads(const SsaOptions& options, int64_t nq, int64_t nk, int64_t h, int64_t g,
                           int64_t d) {
  SsaAttentionGrads grads{Zeros({nq, h, d}),
                          Zeros({nk, g, d}),
                          Zeros({nk, g, d}),
                          {},
                          {},
                          {Zeros({h, d}), Zeros({g, d}), Zeros({h})}};
  if (!options.weight_sharing) {
    grads.dquery_source = Zeros({nq, h, d});
    grads.dvalue_source = Zeros({nk, g, d});
  }
  return grads;
}

// A full-operator problem (f64) with the reference's forward and backward.
struct Problem : fixture::SsaProblem {
  SsaAttentionOutputs Forward() const {
    SsaAttentionOutputs out = NewOutputs(n(), n(), h(), g(), d());
    reference::SsaAttentionForward(options, shape, in, params, out);
    return out;
  }
  SsaAttentionGrads Backward() const {
    SsaAttentionGrads grads = NewGrads(options, n(), n(), h(), g(), d());
    reference::SsaAttentionBackward(options, shape, dout, in, params, grads);
    return grads;
  }
};

Problem RandomProblem(const SsaOptions& options, int64_t b, int64_t t, int64_t h, int64_t g,
                      int64_t d, bool packed, uint64_t seed) {
  return {fixture::RandomProblem(options, b, t, h, g, d, packed, seed)};
}

// ---- Parity with the PyTorch fixtures ----

class SsaReferenceFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(SsaReferenceFixture, EveryOutputAndGradientMatchesPyTorch) {
  const fixture::SsaFixture file(GetParam(), DType::kF64);
  const Problem pr{file.problem()};
  ASSERT_TRUE(ValidateSsaOptions(pr.options).ok());
  auto read = [&](const std::string& name) { return file.Expected(name); };

  const SsaAttentionOutputs out = pr.Forward();
  EXPECT_TRUE(testing::AllClose(out.out, read("out"), kFixtureRelTol, "out"));
  EXPECT_TRUE(testing::AllClose(out.lse, read("lse"), kFixtureRelTol, "lse"));
  EXPECT_TRUE(testing::AllClose(out.query_temperature, read("tau_q"), kFixtureRelTol, "tau_q"));
  EXPECT_TRUE(testing::AllClose(out.value_temperature, read("tau_v"), kFixtureRelTol, "tau_v"));

  const SsaAttentionGrads grads = pr.Backward();
  EXPECT_TRUE(testing::AllClose(grads.du, read("grad.u"), kFixtureRelTol, "du"));
  EXPECT_TRUE(testing::AllClose(grads.dk, read("grad.k"), kFixtureRelTol, "dk"));
  EXPECT_TRUE(testing::AllClose(grads.dv, read("grad.v"), kFixtureRelTol, "dv"));
  if (!pr.options.weight_sharing) {
    EXPECT_TRUE(testing::AllClose(grads.dquery_source, read("grad.query_source"), kFixtureRelTol,
                                  "dquery_source"));
    EXPECT_TRUE(testing::AllClose(grads.dvalue_source, read("grad.value_source"), kFixtureRelTol,
                                  "dvalue_source"));
  }
  EXPECT_TRUE(testing::AllClose(grads.params.query_readout, read("grad.query_readout"),
                                kFixtureRelTol, "d query_readout"));
  EXPECT_TRUE(testing::AllClose(grads.params.value_readout, read("grad.value_readout"),
                                kFixtureRelTol, "d value_readout"));
  EXPECT_TRUE(testing::AllClose(grads.params.alpha, read("grad.alpha"), kFixtureRelTol, "d alpha"));
}

INSTANTIATE_TEST_SUITE_P(Cases, SsaReferenceFixture, ::testing::ValuesIn(fixture::FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// ---- Finite differences ----

TEST(SsaReferenceGradient, EveryInputAndParameterMatchesFiniteDifferences) {
  for (const fixture::Variant& variant : fixture::Variants()) {
    SCOPED_TRACE(variant.name);
    Problem pr = RandomProblem(variant.options, 2, 6, 4, 2, 4, /*packed=*/true, 100);
    const SsaAttentionGrads grads = pr.Backward();
    auto loss = [&] { return testing::Dot(pr.dout, pr.Forward().out); };
    EXPECT_TRUE(testing::GradientMatches(loss, pr.in.u, grads.du, "du"));
    EXPECT_TRUE(testing::GradientMatches(loss, pr.in.k, grads.dk, "dk"));
    EXPECT_TRUE(testing::GradientMatches(loss, pr.in.v, grads.dv, "dv"));
    if (!variant.options.weight_sharing) {
      EXPECT_TRUE(
          testing::GradientMatches(loss, pr.in.query_source, grads.dquery_source, "dquery_source"));
      EXPECT_TRUE(
          testing::GradientMatches(loss, pr.in.value_source, grads.dvalue_source, "dvalue_source"));
    }
    EXPECT_TRUE(testing::GradientMatches(loss, pr.params.query_readout, grads.params.query_readout,
                                         "d query_readout"));
    EXPECT_TRUE(testing::GradientMatches(loss, pr.params.value_readout, grads.params.value_readout,
                                         "d value_readout"));
    EXPECT_TRUE(testing::GradientMatches(loss, pr.params.alpha, grads.params.alpha, "d alpha"));
  }
}

TEST(SsaReferenceGradient, ParameterGradientsAccumulate) {
  const Problem pr = RandomProblem(SsaOptions{}, 1, 5, 2, 1, 4, false, 7);
  const SsaAttentionGrads once = pr.Backward();
  SsaAttentionGrads twice = NewGrads(pr.options, pr.n(), pr.n(), pr.h(), pr.g(), pr.d());
  for (int i = 0; i < 2; ++i) {
    reference::SsaAttentionBackward(pr.options, pr.shape, pr.dout, pr.in, pr.params, twice);
  }
  EXPECT_TRUE(testing::AllClose(twice.du, once.du, testing::kF64RelTol, "du (written)"));
  for (auto [a, b, name] :
       {std::tuple{&twice.params.query_readout, &once.params.query_readout, "d query_readout"},
        std::tuple{&twice.params.value_readout, &once.params.value_readout, "d value_readout"},
        std::tuple{&twice.params.alpha, &once.params.alpha, "d alpha"}}) {
    for (int64_t i = 0; i < b->numel(); ++i) b->data<double>()[i] *= 2;
    EXPECT_TRUE(testing::AllClose(*a, *b, testing::kF64RelTol, name));
  }
}

// ---- SSA reduces to vanilla attention ----

TEST(SsaReference, ZeroReadoutsWithoutPositionTermIsPlainAttentionOnRopedInputs) {
  SsaOptions options;
  options.position_aware = false;
  Problem pr = RandomProblem(options, 2, 9, 4, 2, 8, /*packed=*/true, 300);
  pr.params.query_readout = Zeros(pr.params.query_readout.shape());
  pr.params.value_readout = Zeros(pr.params.value_readout.shape());
  const SsaAttentionOutputs ssa = pr.Forward();
  const SsaAttentionGrads ssa_grads = pr.Backward();

  const kelvin::reference::AttentionShape shape{pr.shape.batch, pr.shape.query_count};
  const Tensor& positions = pr.in.query_positions;
  Tensor q = Zeros(pr.in.u.shape()), k = Zeros(pr.in.k.shape());
  kelvin::reference::RopeForward(pr.in.u, positions, pr.in.inv_freq, q);
  kelvin::reference::RopeForward(pr.in.k, positions, pr.in.inv_freq, k);
  Tensor out = Zeros(q.shape()), lse = Zeros({pr.n(), pr.h()});
  kelvin::reference::AttentionForward(shape, q, k, pr.in.v, positions, out, lse);
  Tensor dq = Zeros(q.shape()), dk_roped = Zeros(k.shape()), dv = Zeros(k.shape());
  kelvin::reference::AttentionBackward(shape, pr.dout, q, k, pr.in.v, positions, dq, dk_roped, dv);
  Tensor du = Zeros(q.shape()), dk = Zeros(k.shape());
  kelvin::reference::RopeBackward(dq, positions, pr.in.inv_freq, du);
  kelvin::reference::RopeBackward(dk_roped, positions, pr.in.inv_freq, dk);

  EXPECT_TRUE(testing::BitIdentical(ssa.query_temperature,
                                    testing::Full({pr.n(), pr.h()}, DType::kF64, 1), "tau_q"));
  EXPECT_TRUE(testing::BitIdentical(ssa.value_temperature,
                                    testing::Full({pr.n(), pr.g()}, DType::kF64, 1), "tau_v"));
  EXPECT_TRUE(testing::AllClose(ssa.out, out, testing::kF64RelTol, "out"));
  EXPECT_TRUE(testing::AllClose(ssa.lse, lse, testing::kF64RelTol, "lse"));
  EXPECT_TRUE(testing::AllClose(ssa_grads.du, du, testing::kF64RelTol, "du"));
  EXPECT_TRUE(testing::AllClose(ssa_grads.dk, dk, testing::kF64RelTol, "dk"));
  EXPECT_TRUE(testing::AllClose(ssa_grads.dv, dv, testing::kF64RelTol, "dv"));
}

// ---- Key blocks and query chunks (ring attention) ----

using fixture::BlockInputs;
using fixture::TokenRange;

TEST(SsaReferenceBlocks, MergedKeyBlocksEqualTheFullOperator) {
  const std::vector<std::vector<int64_t>> key_splits = {
      {0, 6, 13}, {0, 4, 9, 13}, {0, 1, 5, 10, 13}};
  const std::vector<std::vector<int64_t>> query_splits = {{0, 13}, {0, 7, 13}};
  SsaOptions no_sharing;
  no_sharing.weight_sharing = false;
  no_sharing.temperature_clamp = TemperatureClamp{0.8, 1.5};
  for (const SsaOptions& options : {SsaOptions{}, no_sharing}) {
    const Problem pr = RandomProblem(options, 2, 13, 4, 2, 8, /*packed=*/true, 500);
    const int64_t b = pr.shape.batch, h = pr.h(), g = pr.g(), d = pr.d();
    const SsaAttentionOutputs full = pr.Forward();
    const SsaAttentionGrads full_grads = pr.Backward();
    for (const std::vector<int64_t>& keys : key_splits) {
      for (const std::vector<int64_t>& queries : query_splits) {
        SCOPED_TRACE(::testing::Message()
                     << "weight_sharing=" << options.weight_sharing << ", " << keys.size() - 1
                     << " key blocks, " << queries.size() - 1 << " query chunks");
        SsaAttentionGrads total = NewGrads(options, pr.n(), pr.n(), h, g, d);
        for (size_t qi = 0; qi + 1 < queries.size(); ++qi) {
          const int64_t qb = queries[qi], qc = queries[qi + 1] - qb;
          Tensor out = Zeros({b * qc, h, d});
          Tensor lse = testing::Full({b * qc, h}, DType::kF64, -INFINITY);
          for (size_t ki = 0; ki + 1 < keys.size(); ++ki) {
            const int64_t kb = keys[ki], kc = keys[ki + 1] - kb;
            const SsaBlockShape shape{b, qb, qc, kb, kc};
            SsaAttentionOutputs part = NewOutputs(b * qc, b * kc, h, g, d);
            reference::SsaAttentionBlockForward(options, shape, BlockInputs(pr, qb, qc, kb, kc),
                                                pr.params, part);
            EXPECT_TRUE(testing::BitIdentical(
                part.query_temperature, TokenRange(full.query_temperature, b, qb, qc), "tau_q"));
            EXPECT_TRUE(testing::BitIdentical(
                part.value_temperature, TokenRange(full.value_temperature, b, kb, kc), "tau_v"));
            reference::MergeAttentionBlock(out, lse, part.out, part.lse);
          }
          EXPECT_TRUE(testing::AllClose(out, TokenRange(full.out, b, qb, qc), testing::kF64RelTol,
                                        "merged out"));
          EXPECT_TRUE(testing::AllClose(lse, TokenRange(full.lse, b, qb, qc), testing::kF64RelTol,
                                        "merged lse"));
          const Tensor dout = TokenRange(pr.dout, b, qb, qc);
          for (size_t ki = 0; ki + 1 < keys.size(); ++ki) {
            const int64_t kb = keys[ki], kc = keys[ki + 1] - kb;
            SsaAttentionGrads part = NewGrads(options, b * qc, b * kc, h, g, d);
            part.params = total.params;  // parameter gradients accumulate in place
            reference::SsaAttentionBlockBackward(options, {b, qb, qc, kb, kc}, dout, out, lse,
                                                 BlockInputs(pr, qb, qc, kb, kc), pr.params, part);
            fixture::AddTokenRange<double>(total.du, part.du, b, qb);
            fixture::AddTokenRange<double>(total.dquery_source, part.dquery_source, b, qb);
            fixture::AddTokenRange<double>(total.dk, part.dk, b, kb);
            fixture::AddTokenRange<double>(total.dv, part.dv, b, kb);
            fixture::AddTokenRange<double>(total.dvalue_source, part.dvalue_source, b, kb);
          }
        }
        const double tol = testing::kF64RelTol;
        EXPECT_TRUE(testing::AllClose(total.du, full_grads.du, tol, "du"));
        EXPECT_TRUE(testing::AllClose(total.dk, full_grads.dk, tol, "dk"));
        EXPECT_TRUE(testing::AllClose(total.dv, full_grads.dv, tol, "dv"));
        if (!options.weight_sharing) {
          EXPECT_TRUE(testing::AllClose(total.dquery_source, full_grads.dquery_source, tol,
                                        "dquery_source"));
          EXPECT_TRUE(testing::AllClose(total.dvalue_source, full_grads.dvalue_source, tol,
                                        "dvalue_source"));
        }
        EXPECT_TRUE(testing::AllClose(total.params.query_readout, full_grads.params.query_readout,
                                      tol, "d query_readout"));
        EXPECT_TRUE(testing::AllClose(total.params.value_readout, full_grads.params.value_readout,
                                      tol, "d value_readout"));
        EXPECT_TRUE(testing::AllClose(total.params.alpha, full_grads.params.alpha, tol, "d alpha"));
      }
    }
  }
}

TEST(SsaReferenceBlocks, ABlockAQueryCannotSeeGivesZeroAndMinusInfinity) {
  const Problem pr = RandomProblem(SsaOptions{}, 2, 8, 2, 1, 4, false, 900);
  const int64_t b = pr.shape.batch;
  // Queries [0, 4) against keys [4, 8): all in the future.
  SsaAttentionOutputs part = NewOutputs(b * 4, b * 4, pr.h(), pr.g(), pr.d());
  reference::SsaAttentionBlockForward(pr.options, {b, 0, 4, 4, 4}, BlockInputs(pr, 0, 4, 4, 4),
                                      pr.params, part);
  EXPECT_TRUE(testing::BitIdentical(part.out, Zeros(part.out.shape()), "out"));
  EXPECT_TRUE(testing::BitIdentical(
      part.lse, testing::Full(part.lse.shape(), DType::kF64, -INFINITY), "lse"));
}

TEST(SsaReferenceDeathTest, SourcesWithWeightSharingAreRefused) {
  Problem pr = RandomProblem(SsaOptions{}, 1, 3, 2, 1, 4, false, 1);
  pr.in.query_source = pr.in.u;
  EXPECT_DEATH(pr.Forward(), "with weight sharing the temperature sources are u and v");
}

TEST(SsaReferenceDeathTest, KeyPositionsOfAnotherDocumentAreRefused) {
  const Problem pr = RandomProblem(SsaOptions{}, 1, 6, 2, 1, 4, false, 1);
  SsaAttentionInputs in = BlockInputs(pr, 3, 3, 0, 3);
  in.key_positions.data<int32_t>()[0] = 0;
  in.key_positions.data<int32_t>()[1] = 0;  // restarts: keys 1, 2 are not in the query's document
  in.key_positions.data<int32_t>()[2] = 1;
  SsaAttentionOutputs out = NewOutputs(3, 3, pr.h(), pr.g(), pr.d());
  EXPECT_DEATH(reference::SsaAttentionBlockForward(pr.options, {1, 3, 3, 0, 3}, in, pr.params, out),
               "key at global index 1 is in the document of query 3 but their position ids");
}

}  // namespace
}  // namespace kelvin::ssa
