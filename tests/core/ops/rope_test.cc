// RoPE: inverse frequencies against transformers' own values; a golden rotation from transformers'
// apply_rotary_pos_emb; fast CPU and CUDA against the naive reference (packed-document positions,
// long-context positions, plain and Llama 3 frequencies, in place); the reference and fast CPU
// backward against f64 finite differences. N tokens, H heads, d head dim.
#include "core/ops/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "core/copy.h"
#include "core/ops/reference/rope.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

// Llama-3.1-8B: rope_theta 500000, head dim 128, rope_scaling {rope_type llama3, factor 8,
// low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192}.
ops::RopeConfig Llama31Config() {
  ops::RopeConfig config;
  config.type = ops::RopeType::kLlama3;
  return config;
}

ops::RopeConfig PlainConfig() { return ops::RopeConfig(); }  // theta 500000, no scaling (Llama 3)

struct InvFreqEntry {
  int64_t index;
  uint32_t f32_bits;  // the float32 transformers computes
  double f64;         // the same formulas in float64
};

// Produced once with torch 2.15.0 (CPU, AVX2) and transformers 5.24.0, not at test time:
//   f32: LlamaRotaryEmbedding.compute_default_rope_parameters(config) and
//        ROPE_INIT_FUNCTIONS["llama3"](config, "cpu") for the configs above (head_dim 128), bits
//        printed with struct.pack("<f", v);
//   f64: the same expressions typed out in torch.float64 (the arange cast .to(torch.float64)),
//        printed with repr().
// When this test was written all 64 f32 entries of both configs matched bit for bit (the f64 ones
// within 1 ulp: torch's pow and glibc's differ there); a few per band are kept here.
// Llama 3 bands (wavelen = 2 pi / inv_freq against 8192 / 4 = 2048 and 8192 / 1 = 8192):
// i <= 28 high frequency (unchanged), 29..34 medium (smoothed), i >= 35 low (divided by 8).
constexpr InvFreqEntry kPlainEntries[] = {
    {0, 0x3f800000, 1.0},
    {1, 0x3f508ac1, 0.8146172338565447},
    {28, 0x3b527720, 0.0032114459947525913},
    {30, 0x3b0baa41, 0.0021311195369119653},
    {32, 0x3ab95d21, 0.001414213562373095},
    {63, 0x3624c2ff, 2.455140791131609e-06},
};
constexpr InvFreqEntry kLlama3Entries[] = {
    {0, 0x3f800000, 1.0},                      // high: unchanged
    {17, 0x3cfaf53f, 0.030634520893224042},    // high: unchanged
    {28, 0x3b527720, 0.0032114459947525913},   // high: the last unchanged one
    {29, 0x3b0dfd06, 0.002166570763503359},    // medium: the first smoothed one
    {32, 0x3a0995d2, 0.0005248461609929547},   // medium: smoothed
    {34, 0x393b2dd2, 0.00017850781276799638},  // medium: the last smoothed one
    {35, 0x38c86886, 9.556212353964683e-05},   // low: plain / 8
    {45, 0x374e51f5, 1.2297638677963614e-05},  // low: plain / 8
    {63, 0x34a4c2ff, 3.068925988914511e-07},   // low: plain / 8
};

void ExpectInverseFrequencies(const ops::RopeConfig& config, const InvFreqEntry* entries,
                              size_t count) {
  const Tensor f32 = ops::RopeInverseFrequencies(config, 128, DType::kF32);  // [64]
  const Tensor f64 = ops::RopeInverseFrequencies(config, 128, DType::kF64);  // [64]
  ASSERT_EQ(f32.shape(), Shape({64}));
  for (size_t k = 0; k < count; ++k) {
    const InvFreqEntry& e = entries[k];
    SCOPED_TRACE(::testing::Message() << "inv_freq[" << e.index << "]");
    EXPECT_EQ(std::bit_cast<uint32_t>(f32.data<float>()[e.index]), e.f32_bits)
        << f32.data<float>()[e.index] << " vs " << std::bit_cast<float>(e.f32_bits);
    EXPECT_NEAR(f64.data<double>()[e.index], e.f64, e.f64 * testing::kF64RelTol);
  }
}

TEST(RopeInverseFrequencies, PlainMatchesTransformers) {
  ExpectInverseFrequencies(PlainConfig(), kPlainEntries, std::size(kPlainEntries));
}

TEST(RopeInverseFrequencies, Llama3ScalingMatchesTransformers) {
  ExpectInverseFrequencies(Llama31Config(), kLlama3Entries, std::size(kLlama3Entries));
  // Every entry of the two outer bands against the plain frequencies: the same, or exactly / 8.
  const Tensor plain = ops::RopeInverseFrequencies(PlainConfig(), 128, DType::kF32);
  const Tensor scaled = ops::RopeInverseFrequencies(Llama31Config(), 128, DType::kF32);
  for (int64_t i = 0; i < 64; ++i) {
    const float p = plain.data<float>()[i], s = scaled.data<float>()[i];
    if (i <= 28) {
      EXPECT_EQ(s, p) << "high-frequency inv_freq[" << i << "]";
    } else if (i >= 35) {
      EXPECT_EQ(s, p / 8) << "low-frequency inv_freq[" << i << "]";
    } else {
      EXPECT_TRUE(p / 8 < s && s < p) << "medium inv_freq[" << i << "]";
    }
  }
}

// The other scalings at head dim 128, produced once with torch 2.15.0 and transformers 5.23.0 as
// above: f32 bits of ROPE_INIT_FUNCTIONS[type](config, "cpu") (longrope's long factors with
// seq_len = original + 1, as its per-call switch asks), and its attention factor (repr()).
struct ScalingCase {
  const char* name;
  ops::RopeConfig config;
  bool long_factors;
  double attention_factor;
  std::vector<std::pair<int64_t, uint32_t>> entries;  // index, f32 bits
};

std::vector<double> Factors(double first, double step) {  // [64]: first + step * i
  std::vector<double> factors;
  for (int i = 0; i < 64; ++i) factors.push_back(first + step * i);
  return factors;
}

std::vector<ScalingCase> ScalingCases() {
  ops::RopeConfig yarn;  // Llama-3-8B 8K -> 128K: theta 500000, factor 16, default betas
  yarn.type = ops::RopeType::kYarn;
  yarn.factor = 16.0;
  yarn.original_max_position = 8192;
  ops::RopeConfig deepseek;  // DeepSeek's form: mscales, truncate false
  deepseek.theta = 10000.0;
  deepseek.type = ops::RopeType::kYarn;
  deepseek.factor = 40.0;
  deepseek.original_max_position = 4096;
  deepseek.beta_fast = 32;
  deepseek.beta_slow = 1;
  deepseek.mscale = 1.0;
  deepseek.mscale_all_dim = 0.707;
  deepseek.truncate = false;
  ops::RopeConfig linear;
  linear.type = ops::RopeType::kLinear;
  linear.factor = 4.0;
  ops::RopeConfig longrope;  // short factors 1 + 0.01 i, long 1 + 0.5 i
  longrope.theta = 10000.0;
  longrope.type = ops::RopeType::kLongrope;
  longrope.factor = 32.0;
  longrope.original_max_position = 4096;
  longrope.short_factor = Factors(1.0, 0.01);
  longrope.long_factor = Factors(1.0, 0.5);
  return {
      {"yarn",
       yarn,
       false,
       1.2772588722239782,
       {{0, 0x3f800000},
        {1, 0x3f508ac1},
        {10, 0x3e03c6a0},
        {20, 0x3c71668c},
        {30, 0x3a3cf566},
        {40, 0x378fc8f8},
        {50, 0x361406cb},
        {63, 0x3424c2ff}}},
      {"yarn mscale",
       deepseek,
       false,
       1.0857263992561355,
       {{0, 0x3f800000},
        {1, 0x3f5dafd7},
        {10, 0x3e72d423},
        {20, 0x3d6655c2},
        {30, 0x3c0a6214},
        {40, 0x3a3d6f6d},
        {50, 0x379d43a3},
        {63, 0x3641bd81}}},
      {"linear",
       linear,
       false,
       1.0,
       {{0, 0x3e800000},
        {1, 0x3e508ac1},
        {10, 0x3d03c6a0},
        {20, 0x3b87a9c3},
        {30, 0x3a0baa41},
        {40, 0x388fc8f8},
        {50, 0x371406cb},
        {63, 0x3524c2ff}}},
      {"longrope short",
       longrope,
       false,
       1.1902380714238083,
       {{0, 0x3f800000},
        {1, 0x3f5b7df1},
        {10, 0x3e5cc0d9},
        {20, 0x3d3ff221},
        {30, 0x3c281093},
        {40, 0x3b1407df},
        {50, 0x3a030db3},
        {63, 0x389492e6}}},
      {"longrope long",
       longrope,
       true,
       1.1902380714238083,
       {{0, 0x3f800000},
        {1, 0x3f13ca8f},
        {10, 0x3d21e2c2},
        {20, 0x3ba78430},
        {30, 0x3a5a7bf2},
        {40, 0x391de643},
        {50, 0x37f1f1e7},
        {63, 0x366e7316}}},
  };
}

TEST(RopeInverseFrequencies, EveryScalingMatchesTransformersBitForBit) {
  for (const ScalingCase& c : ScalingCases()) {
    SCOPED_TRACE(c.name);
    const Tensor f32 = ops::RopeInverseFrequencies(c.config, 128, DType::kF32, c.long_factors);
    for (const auto& [index, f32_bits] : c.entries) {
      EXPECT_EQ(std::bit_cast<uint32_t>(f32.data<float>()[index]), f32_bits)
          << "inv_freq[" << index << "] " << f32.data<float>()[index] << " vs "
          << std::bit_cast<float>(f32_bits);
    }
    EXPECT_NEAR(ops::RopeAttentionFactor(c.config), c.attention_factor, 1e-15);
  }
}

TEST(RopeInverseFrequencies, LongropeSwitchesPastTheOriginalLength) {
  ops::RopeConfig longrope = ScalingCases()[3].config;     // original 4096
  EXPECT_FALSE(ops::RopeUsesLongFactors(longrope, 4095));  // a call of 4096 positions: short
  EXPECT_TRUE(ops::RopeUsesLongFactors(longrope, 4096));
  EXPECT_FALSE(ops::RopeUsesLongFactors(ScalingCases()[0].config, 1 << 20));  // yarn: never
}

const Context& CpuContext() { return testing::ContextFor(Device::Cpu()); }

Tensor Positions(const std::vector<int32_t>& values) {  // [N] i32 host tensor
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

std::vector<int32_t> Range(int32_t begin, int32_t end) {  // begin, begin + 1, ..., end - 1
  std::vector<int32_t> v;
  for (int32_t p = begin; p < end; ++p) v.push_back(p);
  return v;
}

// transformers' apply_rotary_pos_emb (rotate_half layout) in torch.float64, produced once with the
// versions above: d = 8, theta = 10000, inv = 1 / theta ** (arange(0, d, 2).to(float64) / d),
// positions [1, 5], emb = cat((freqs, freqs), -1), q, _ = apply_rotary_pos_emb(x, x, emb.cos(),
// emb.sin()) for x = arange(16) / 8 - 1 viewed as [B 1, H 1, T 2, d 8]; q printed with repr().
TEST(RopeForward, MatchesTransformersApplyRotaryPosEmb) {
  constexpr double kExpected[] = {
      -0.11956681346419151, -0.8331911133757121,  -0.7474625419789573, -0.6248746875208594,
      -1.1116221377419664,  -0.4604808015452343,  -0.2574873751047913, -0.12562493739583855,
      0.4794621373315692,   -0.18994314139133028, 0.21220318814573283, 0.3706203307389095,
      0.14183109273161312,  0.6084172935070083,   0.7615574876138943,  0.8768640547102962};
  ops::RopeConfig config;
  config.theta = 10000;
  const Tensor inv_freq = ops::RopeInverseFrequencies(config, 8, DType::kF64);  // [4]
  Tensor x = Tensor::Empty({2, 1, 8}, DType::kF64),
         expected = Tensor::Empty(x.shape(), DType::kF64);
  for (int64_t i = 0; i < 16; ++i) {
    x.data<double>()[i] = static_cast<double>(i) / 8 - 1;
    expected.data<double>()[i] = kExpected[i];
  }
  Tensor y = Tensor::Empty(x.shape(), DType::kF64);  // [N, H, d]
  ops::RopeForward(CpuContext(), x, Positions({1, 5}), inv_freq, y);
  EXPECT_TRUE(testing::AllClose(y, expected, testing::kF64RelTol, "y"));
}

struct RopeCase {
  const char* what;
  int64_t heads, d;
  std::vector<int32_t> positions;  // [N]
};

std::vector<RopeCase> Cases() {
  std::vector<int32_t> packed = Range(0, 30);  // three documents packed in one sequence
  for (const int32_t length : {25, 16}) {
    const std::vector<int32_t> document = Range(0, length);
    packed.insert(packed.end(), document.begin(), document.end());
  }
  return {
      {"one token, d = 2", 1, 2, {5}},
      {"71 tokens: packed documents of 30, 25, 16", 3, 64, packed},
      {"17 tokens at 131000..131016", 5, 128, Range(131000, 131017)},
      {"192 tokens at 8000..8191", 2, 64, Range(8000, 8192)},
      {"Llama-3-8B heads, 3 tokens", 32, 128, {0, 4095, 70000}},
  };
}

class RopeTest : public ::testing::TestWithParam<Backend> {};

TEST_P(RopeTest, ForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const double tol = testing::RelTolerance(backend.dtype);
  uint64_t seed = 300;
  // yarn: cos and sin times its attention factor (1.277), in the kernels as in the reference.
  const std::pair<const char*, ops::RopeConfig> configs[] = {{"plain", PlainConfig()},
                                                             {"llama3 scaling", Llama31Config()},
                                                             {"yarn", ScalingCases()[0].config}};
  for (const auto& [name, config] : configs) {
    const double factor = ops::RopeAttentionFactor(config);
    for (const RopeCase& c : Cases()) {
      SCOPED_TRACE(::testing::Message() << c.what << ", " << name);
      const int64_t n = static_cast<int64_t>(c.positions.size());
      const Shape shape = {n, c.heads, c.d};
      // Inputs rounded to the backend dtype; the reference sees exactly the same values in f64.
      const Tensor x = testing::Random(shape, backend.dtype, ++seed, -2, 2);   // [N, H, d]
      const Tensor dy = testing::Random(shape, backend.dtype, ++seed, -1, 1);  // [N, H, d]
      const Tensor inv_freq = ops::RopeInverseFrequencies(config, c.d, AccumDType(backend.dtype));
      const Tensor positions = Positions(c.positions);  // [N]

      Tensor y_ref = Tensor::Empty(shape, DType::kF64), dx_ref = Tensor::Empty(shape, DType::kF64);
      reference::RopeForward(testing::Cast(x, DType::kF64), positions, inv_freq, y_ref, factor);
      reference::RopeBackward(testing::Cast(dy, DType::kF64), positions, inv_freq, dx_ref, factor);

      const Tensor pos_d = testing::ToDevice(positions, backend.device);
      const Tensor inv_d = testing::ToDevice(inv_freq, backend.device);
      Tensor y = Tensor::Empty(shape, backend.dtype, backend.device);
      ops::RopeForward(ctx, testing::ToDevice(x, backend.device), pos_d, inv_d, y, factor);
      EXPECT_TRUE(testing::AllClose(y, y_ref, tol, "y"));
      Tensor dx = Tensor::Empty(shape, backend.dtype, backend.device);
      ops::RopeBackward(ctx, testing::ToDevice(dy, backend.device), pos_d, inv_d, dx, factor);
      EXPECT_TRUE(testing::AllClose(dx, dx_ref, tol, "dx"));

      // In place (y = x, dx = dy) gives the same bits.
      Tensor in_place = CopyToDevice(ctx, x, backend.device);
      ops::RopeForward(ctx, in_place, pos_d, inv_d, in_place, factor);
      EXPECT_TRUE(testing::BitIdentical(in_place, y, "y computed in place"));
      in_place = CopyToDevice(ctx, dy, backend.device);
      ops::RopeBackward(ctx, in_place, pos_d, inv_d, in_place, factor);
      EXPECT_TRUE(testing::BitIdentical(in_place, dx, "dx computed in place"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RopeTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// loss = <dy, Rope(x)>; its gradient wrt x is exactly what RopeBackward returns for dy.
TEST(RopeGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const Shape shape = {4, 2, 6};  // [N, H, d]
  Tensor x = testing::Random(shape, DType::kF64, 1, -2, 2);
  const Tensor dy = testing::Random(shape, DType::kF64, 2);
  const Tensor positions = Positions({3, 0, 1, 700});
  const Tensor inv_freq = ops::RopeInverseFrequencies(Llama31Config(), 6, DType::kF64);
  auto loss = [&] {
    Tensor y = Tensor::Empty(shape, DType::kF64);
    reference::RopeForward(x, positions, inv_freq, y);
    return testing::Dot(dy, y);
  };
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor dx = Tensor::Empty(shape, DType::kF64);
    if (fast) {
      ops::RopeBackward(CpuContext(), dy, positions, inv_freq, dx);
    } else {
      reference::RopeBackward(dy, positions, inv_freq, dx);
    }
    EXPECT_TRUE(testing::GradientMatches(loss, x, dx, "dx"));
  }
}
}  // namespace
}  // namespace kelvin
