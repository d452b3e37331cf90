// The SSA temperature module: values against hand-computed ones, every flag's effect, f32 against
// f64, the backward (source, read-out, alpha) against f64 finite differences under every flag and
// the clamp, accumulation into existing gradients, the vectorised f32 Phi, thread-count
// independence, and the statistics.
#include "ssa/temperature.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ssa/cpu_vector_math.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::ssa {
namespace {

const Context& Cpu() { return testing::ContextFor(Device::Cpu()); }

// Positions [N] i32 of B rows of T tokens, each row two documents (restart at T/2).
Tensor PackedPositions(int64_t batch, int64_t seq) {
  Tensor p = Tensor::Empty({batch * seq}, DType::kI32);
  for (int64_t i = 0; i < batch * seq; ++i) {
    const int64_t t = i % seq;
    p.data<int32_t>()[i] = static_cast<int32_t>(t < seq / 2 ? t : t - seq / 2);
  }
  return p;
}

// One token, one head, d = 2: source (1, -0.75), read-out (1, -0.5), alpha -2, position 3.
// z = GeLU(1) - 0.5 GeLU(-0.75) = 0.92633000320986850 (exact erf GeLU).
TEST(SsaTemperature, MatchesHandComputedValues) {
  const Tensor source = testing::Full({1, 1, 2}, DType::kF64, 1.0);
  source.data<double>()[1] = -0.75;
  const Tensor readout = testing::Full({1, 2}, DType::kF64, 1.0);
  readout.data<double>()[1] = -0.5;
  const Tensor alpha = testing::Full({1}, DType::kF64, -2.0);
  const Tensor positions = testing::Full({1}, DType::kI32, 3);
  Tensor tau = Tensor::ZerosCpu({1, 1}, DType::kF64),
         tanh_z = Tensor::ZerosCpu({1, 1}, DType::kF64);
  const SsaOptions options;
  QueryTemperatureForward(Cpu(), options, source, readout, alpha, positions, tau, tanh_z);
  // tanh(z) + 1 + sigma(-2) ln 4
  EXPECT_NEAR(tau.data<double>()[0], 1.8941285702598618, 1e-15);
  EXPECT_NEAR(tanh_z.data<double>()[0], std::tanh(0.9263300032098685), 1e-15);
  ValueTemperatureForward(Cpu(), options, source, readout, tau, tanh_z);
  EXPECT_NEAR(tau.data<double>()[0], 1.7288782316315863, 1e-15);  // tanh(z) + 1
}

struct Problem {
  int64_t n = 10, h = 3, d = 5;
  Tensor source = testing::Random({n, h, d}, DType::kF64, 11, -2, 2);
  Tensor readout = testing::Random({h, d}, DType::kF64, 12, -0.8, 0.8);
  Tensor alpha = testing::Random({h}, DType::kF64, 13, -3, 1);
  Tensor positions = PackedPositions(2, 5);
  Tensor weights = testing::Random({n, h}, DType::kF64, 14);  // probe loss sum(w * tau)

  Tensor Tau(const SsaOptions& options, bool query, Tensor* tanh_z = nullptr) const {
    Tensor tau = Tensor::ZerosCpu({n, h}, DType::kF64), t = Tensor::ZerosCpu({n, h}, DType::kF64);
    if (query) {
      QueryTemperatureForward(Cpu(), options, source, readout, alpha, positions, tau, t);
    } else {
      ValueTemperatureForward(Cpu(), options, source, readout, tau, t);
    }
    if (tanh_z != nullptr) *tanh_z = t;
    return tau;
  }
};

TEST(SsaTemperature, FlagsSelectTheTerms) {
  const Problem pr;
  SsaOptions all;
  const Tensor tau_all = pr.Tau(all, true);
  SsaOptions no_token = all, no_position = all;
  no_token.token_aware = false;
  no_position.position_aware = false;
  const Tensor tau_no_token = pr.Tau(no_token, true), tau_no_position = pr.Tau(no_position, true);
  for (int64_t t = 0; t < pr.n; ++t) {
    for (int64_t k = 0; k < pr.h; ++k) {
      const int64_t i = t * pr.h + k;
      const double position_term = 1.0 / (1.0 + std::exp(-pr.alpha.data<double>()[k])) *
                                   std::log(pr.positions.data<int32_t>()[t] + 1.0);
      EXPECT_DOUBLE_EQ(tau_no_token.data<double>()[i], 1.0 + position_term);
      EXPECT_NEAR(tau_all.data<double>()[i], tau_no_position.data<double>()[i] + position_term,
                  1e-15);
    }
  }
  // The value temperature has no position term: it equals the query one without it.
  EXPECT_TRUE(testing::BitIdentical(pr.Tau(all, false), tau_no_position, "tau^v"));
  // Off: exactly 1, whatever the clamp.
  SsaOptions off = all;
  off.query_temperature = off.value_temperature = false;
  off.temperature_clamp = TemperatureClamp{1.2, 1.5};
  EXPECT_TRUE(testing::BitIdentical(pr.Tau(off, true), testing::Full({pr.n, pr.h}, DType::kF64, 1),
                                    "tau^q off"));
  EXPECT_TRUE(testing::BitIdentical(pr.Tau(off, false), testing::Full({pr.n, pr.h}, DType::kF64, 1),
                                    "tau^v off"));
  // Zero read-outs: the token term is exactly 1 (docs/ssa.md "Initialisation").
  Problem zero;
  zero.readout = Tensor::ZerosCpu({zero.h, zero.d}, DType::kF64);
  EXPECT_TRUE(testing::BitIdentical(zero.Tau(all, false),
                                    testing::Full({zero.n, zero.h}, DType::kF64, 1), "tau^v"));
  EXPECT_TRUE(testing::BitIdentical(zero.Tau(all, true), pr.Tau(no_token, true), "tau^q"));
}

TEST(SsaTemperature, ClampBoundsTheValuesAndStopsTheirGradient) {
  const Problem pr;
  SsaOptions free_options, clamped = free_options;
  clamped.temperature_clamp = TemperatureClamp{0.8, 1.5};
  const Tensor raw = pr.Tau(free_options, true);
  Tensor tanh_z;
  const Tensor tau = pr.Tau(clamped, true, &tanh_z);
  Tensor dsource = Tensor::ZerosCpu(pr.source.shape(), DType::kF64);
  Tensor dreadout = Tensor::ZerosCpu(pr.readout.shape(), DType::kF64);
  Tensor dalpha = Tensor::ZerosCpu(pr.alpha.shape(), DType::kF64);
  const Tensor ones = testing::Full({pr.n, pr.h}, DType::kF64, 1);
  QueryTemperatureBackward(Cpu(), clamped, ones, pr.source, pr.readout, pr.alpha, pr.positions,
                           tanh_z, dsource, dreadout, dalpha);
  int clamped_count = 0;
  for (int64_t i = 0; i < pr.n * pr.h; ++i) {
    const double r = raw.data<double>()[i];
    EXPECT_DOUBLE_EQ(tau.data<double>()[i], std::clamp(r, 0.8, 1.5));
    if (r >= 0.8 && r <= 1.5) continue;
    ++clamped_count;
    for (int64_t e = 0; e < pr.d; ++e) EXPECT_EQ(dsource.data<double>()[i * pr.d + e], 0.0);
  }
  EXPECT_GT(clamped_count, 0);
  EXPECT_LT(clamped_count, pr.n * pr.h);
}

struct Variant {
  std::string name;
  SsaOptions options;
};

std::vector<Variant> Variants() {
  std::vector<Variant> variants{{"default", {}}};
  SsaOptions o;
  o.token_aware = false;
  variants.push_back({"token_aware off", o});
  o = {};
  o.position_aware = false;
  variants.push_back({"position_aware off", o});
  o = {};
  o.temperature_clamp = TemperatureClamp{0.8, 1.5};
  variants.push_back({"clamp", o});
  o = {};
  o.query_temperature = o.value_temperature = false;
  variants.push_back({"off", o});
  return variants;
}

TEST(SsaTemperature, BackwardMatchesFiniteDifferences) {
  for (const Variant& variant : Variants()) {
    for (const bool query : {true, false}) {
      SCOPED_TRACE(variant.name + (query ? ", query" : ", value"));
      Problem pr;
      auto loss = [&] { return testing::Dot(pr.weights, pr.Tau(variant.options, query)); };
      Tensor tanh_z;
      pr.Tau(variant.options, query, &tanh_z);
      Tensor dsource = Tensor::ZerosCpu(pr.source.shape(), DType::kF64);
      Tensor dreadout = Tensor::ZerosCpu(pr.readout.shape(), DType::kF64);
      Tensor dalpha = Tensor::ZerosCpu(pr.alpha.shape(), DType::kF64);
      if (query) {
        QueryTemperatureBackward(Cpu(), variant.options, pr.weights, pr.source, pr.readout,
                                 pr.alpha, pr.positions, tanh_z, dsource, dreadout, dalpha);
        EXPECT_TRUE(testing::GradientMatches(loss, pr.alpha, dalpha, "dalpha"));
      } else {
        ValueTemperatureBackward(Cpu(), variant.options, pr.weights, pr.source, pr.readout, tanh_z,
                                 dsource, dreadout);
      }
      EXPECT_TRUE(testing::GradientMatches(loss, pr.source, dsource, "dsource"));
      EXPECT_TRUE(testing::GradientMatches(loss, pr.readout, dreadout, "dreadout"));
    }
  }
}

TEST(SsaTemperature, BackwardAccumulatesIntoItsOutputs) {
  const Problem pr;
  const SsaOptions options;
  Tensor tanh_z;
  pr.Tau(options, true, &tanh_z);
  auto run = [&](double start) {
    Tensor dsource = testing::Full(pr.source.shape(), DType::kF64, start);
    Tensor dreadout = testing::Full(pr.readout.shape(), DType::kF64, start);
    Tensor dalpha = testing::Full(pr.alpha.shape(), DType::kF64, start);
    QueryTemperatureBackward(Cpu(), options, pr.weights, pr.source, pr.readout, pr.alpha,
                             pr.positions, tanh_z, dsource, dreadout, dalpha);
    return std::vector<Tensor>{dsource, dreadout, dalpha};
  };
  const std::vector<Tensor> from_zero = run(0.0), from_one = run(1.0);
  for (size_t i = 0; i < from_zero.size(); ++i) {
    for (int64_t j = 0; j < from_zero[i].numel(); ++j) {
      EXPECT_DOUBLE_EQ(from_one[i].data<double>()[j], from_zero[i].data<double>()[j] + 1.0);
    }
  }
}

TEST(SsaTemperature, FloatMatchesDouble) {
  const Problem pr;
  SsaOptions options;
  options.temperature_clamp = TemperatureClamp{0.5, 2.5};
  for (const bool query : {true, false}) {
    SCOPED_TRACE(query ? "query" : "value");
    auto run = [&](DType dtype) {
      const Tensor source = testing::Cast(pr.source, dtype),
                   readout = testing::Cast(pr.readout, dtype),
                   alpha = testing::Cast(pr.alpha, dtype), w = testing::Cast(pr.weights, dtype);
      Tensor tau = Tensor::ZerosCpu({pr.n, pr.h}, dtype),
             tanh_z = Tensor::ZerosCpu({pr.n, pr.h}, dtype);
      Tensor dsource = Tensor::ZerosCpu(source.shape(), dtype);
      Tensor dreadout = Tensor::ZerosCpu(readout.shape(), dtype);
      Tensor dalpha = Tensor::ZerosCpu(alpha.shape(), dtype);
      if (query) {
        QueryTemperatureForward(Cpu(), options, source, readout, alpha, pr.positions, tau, tanh_z);
        QueryTemperatureBackward(Cpu(), options, w, source, readout, alpha, pr.positions, tanh_z,
                                 dsource, dreadout, dalpha);
      } else {
        ValueTemperatureForward(Cpu(), options, source, readout, tau, tanh_z);
        ValueTemperatureBackward(Cpu(), options, w, source, readout, tanh_z, dsource, dreadout);
      }
      return std::vector<Tensor>{tau, dsource, dreadout, dalpha};
    };
    const std::vector<Tensor> f32 = run(DType::kF32), f64 = run(DType::kF64);
    const char* names[] = {"tau", "dsource", "dreadout", "dalpha"};
    for (size_t i = 0; i < (query ? 4u : 3u); ++i) {
      EXPECT_TRUE(testing::AllClose(f32[i], f64[i], testing::kF32RelTol, names[i]));
    }
  }
}

// The vectorised f32 Phi behind the f32 GeLU rows, against libm's f64 erfc at every 1/1024 in
// [-14, 14]: within 2.5e-7 absolute everywhere and 5e-5 relative in the left tail down to -12
// (Phi = 1.8e-33; the f32 rounding of exp's argument, -72 there, bounds it), where 1 + erf would
// have cancelled entirely; below about -13 it underflows to 0.
TEST(SsaTemperature, VectorisedNormalCdfIsAccurate) {
  double worst_abs = 0, worst_rel = 0;
  for (int i = -14 * 1024; i <= 14 * 1024; ++i) {
    const float x = static_cast<float>(i) / 1024.0f;
    const double exact = 0.5 * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    const double got = cpu::NormalCdfF32(x);
    worst_abs = std::max(worst_abs, std::abs(got - exact));
    if (x < 0 && x >= -12) worst_rel = std::max(worst_rel, std::abs(got - exact) / exact);
  }
  EXPECT_LT(worst_abs, 2.5e-7);
  EXPECT_LT(worst_rel, 5e-5);
}

// The backward's parameter-gradient sums run over fixed token chunks: one and two threads give
// the same bits (700 tokens: three chunks).
TEST(SsaTemperature, ResultsDoNotDependOnTheThreadCount) {
  const int64_t n = 700, heads = 3, d = 40;
  const Tensor source = testing::Random({n, heads, d}, DType::kF32, 41, -3.0, 3.0);
  const Tensor readout = testing::Random({heads, d}, DType::kF32, 42);
  const Tensor alpha = testing::Random({heads}, DType::kF32, 43);
  const Tensor dtau = testing::Random({n, heads}, DType::kF32, 44);
  const Tensor positions = PackedPositions(2, n / 2);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor tau = Tensor::ZerosCpu({n, heads}, DType::kF32),
           tanh_z = Tensor::ZerosCpu({n, heads}, DType::kF32);
    Tensor dsource = Tensor::ZerosCpu(source.shape(), DType::kF32);
    Tensor dreadout = Tensor::ZerosCpu(readout.shape(), DType::kF32);
    Tensor dalpha = Tensor::ZerosCpu(alpha.shape(), DType::kF32);
    QueryTemperatureForward(Cpu(), SsaOptions(), source, readout, alpha, positions, tau, tanh_z);
    QueryTemperatureBackward(Cpu(), SsaOptions(), dtau, source, readout, alpha, positions, tanh_z,
                             dsource, dreadout, dalpha);
    return std::vector<Tensor>{tau, dsource, dreadout, dalpha};
  };
  const int threads = omp_get_max_threads();
  const std::vector<Tensor> one = run(1), two = run(2);
  omp_set_num_threads(threads);
  const char* names[] = {"tau", "dsource", "dreadout", "dalpha"};
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(testing::BitIdentical(two[i], one[i], names[i]));
  }
}

TEST(SsaTemperature, StatisticsSummariseEachTemperature) {
  Tensor tau_q = Tensor::Empty({2, 2}, DType::kF32);
  const float q_values[] = {0.5f, 1.5f, 1.0f, 2.0f};
  std::copy(q_values, q_values + 4, tau_q.data<float>());
  const Tensor tau_v = testing::Full({3, 1}, DType::kF64, 1.25);
  Tensor alpha = Tensor::Empty({2}, DType::kF64);
  alpha.data<double>()[0] = 0.0;
  alpha.data<double>()[1] = -8.0;
  const TemperatureStatistics stats = ComputeTemperatureStatistics(Cpu(), tau_q, tau_v, alpha);
  EXPECT_EQ(stats.query.count, 4);
  EXPECT_DOUBLE_EQ(stats.query.mean, 1.25);
  EXPECT_DOUBLE_EQ(stats.query.std, std::sqrt(0.3125));  // population std
  EXPECT_DOUBLE_EQ(stats.query.min, 0.5);
  EXPECT_DOUBLE_EQ(stats.query.max, 2.0);
  EXPECT_EQ(stats.value.count, 3);
  EXPECT_DOUBLE_EQ(stats.value.mean, 1.25);
  EXPECT_DOUBLE_EQ(stats.value.std, 0.0);
  ASSERT_EQ(stats.sigma_alpha.size(), 2u);
  EXPECT_DOUBLE_EQ(stats.sigma_alpha[0], 0.5);
  EXPECT_NEAR(stats.sigma_alpha[1], 3.3535013046647811e-4, 1e-18);
  const TemperatureStatistics empty = ComputeTemperatureStatistics(
      Cpu(), Tensor::ZerosCpu({0, 2}, DType::kF32), Tensor::ZerosCpu({0, 1}, DType::kF32), alpha);
  EXPECT_EQ(empty.query.count, 0);
  EXPECT_EQ(empty.query.mean, 0.0);
}

// Merging summaries: the union's moments from the parts'; one part (a group of one rank) is
// returned exactly, not rebuilt from its moments (3 x 0.1 / 3 is not 0.1 in doubles).
TEST(SsaTemperature, MergedSummariesAreTheUnionsAndOnePartIsItself) {
  const TemperatureSummary a{3, 0.1, 0.2, -0.3, 0.4}, b{1, 1.1, 0.0, 1.1, 1.1};
  const TemperatureSummary one = MergeTemperatureSummaries({a});
  EXPECT_EQ(one.count, a.count);
  EXPECT_EQ(one.mean, a.mean);
  EXPECT_EQ(one.std, a.std);
  EXPECT_EQ(one.min, a.min);
  EXPECT_EQ(one.max, a.max);
  const TemperatureSummary both = MergeTemperatureSummaries({a, b, TemperatureSummary{}});
  EXPECT_EQ(both.count, 4);
  EXPECT_DOUBLE_EQ(both.mean, (3 * 0.1 + 1.1) / 4);
  // E[x^2] = (3 (0.2^2 + 0.1^2) + 1.1^2) / 4, minus the mean squared.
  EXPECT_NEAR(both.std, std::sqrt((3 * 0.05 + 1.21) / 4 - 0.35 * 0.35), 1e-15);
  EXPECT_EQ(both.min, -0.3);
  EXPECT_EQ(both.max, 1.1);
}

// On CUDA the summary is reduced on the device: it equals the host's of the same values (sums
// in another order: within f64 rounding), alpha is read back, and a temperature that is off stays
// empty.
TEST(SsaTemperatureCuda, DeviceStatisticsEqualTheHosts) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda(0));
  const Context& cuda = testing::ContextFor(Device::Cuda(0));
  const Tensor tau_q = testing::Random({1237, 5}, DType::kF32, 17, 0.3, 3.0);  // [N, H]
  const Tensor alpha = testing::Random({5}, DType::kF32, 18, -2, 2);           // [H]
  const TemperatureStatistics host = ComputeTemperatureStatistics(Cpu(), tau_q, Tensor(), alpha);
  const TemperatureStatistics device =
      ComputeTemperatureStatistics(cuda, testing::ToDevice(tau_q, Device::Cuda(0)), Tensor(),
                                   testing::ToDevice(alpha, Device::Cuda(0)));
  EXPECT_EQ(device.query.count, host.query.count);
  EXPECT_NEAR(device.query.mean, host.query.mean, testing::kF64RelTol * host.query.mean);
  EXPECT_NEAR(device.query.std, host.query.std, testing::kF64RelTol * host.query.std);
  EXPECT_EQ(device.query.min, host.query.min);
  EXPECT_EQ(device.query.max, host.query.max);
  EXPECT_EQ(device.value.count, 0);
  ASSERT_EQ(device.sigma_alpha.size(), host.sigma_alpha.size());
  for (size_t h = 0; h < host.sigma_alpha.size(); ++h) {
    EXPECT_EQ(device.sigma_alpha[h], host.sigma_alpha[h]) << "head " << h;
  }
}

TEST(SsaTemperatureDeathTest, WrongReadoutShapeIsRefused) {
  const Problem pr;
  Tensor tau = Tensor::ZerosCpu({pr.n, pr.h}, DType::kF64), tanh_z = tau;
  const Tensor bad_readout = Tensor::ZerosCpu({pr.h, pr.d + 1}, DType::kF64);
  EXPECT_DEATH(ValueTemperatureForward(Cpu(), SsaOptions{}, pr.source, bad_readout, tau, tanh_z),
               "ssa.value_temperature.readout is f64\\[3, 6\\]@cpu, expected shape \\[3, 5\\]");
}

}  // namespace
}  // namespace kelvin::ssa
