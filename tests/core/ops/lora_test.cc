// LoRA's update y += s (x A^T) B^T: the forward against a plain triple loop, the backward's dx, dA
// and dB against central finite differences in f64, and frozen adapters (undefined dA, dB) skipped.
#include "core/ops/lora.h"

#include <gtest/gtest.h>

#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

constexpr int64_t kN = 3, kIn = 5, kOut = 4, kRank = 2;  // N rows, in / out features, rank r
constexpr double kScale = 1.75;

// y0 [N, out] + s (x A^T) B^T by loops, f64.
Tensor NaiveLora(const Tensor& x, const Tensor& a, const Tensor& b, const Tensor& y0) {
  Tensor y = testing::Cast(y0, DType::kF64);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t o = 0; o < kOut; ++o) {
      double sum = 0;
      for (int64_t r = 0; r < kRank; ++r) {
        double z = 0;
        for (int64_t k = 0; k < kIn; ++k)
          z += x.data<double>()[i * kIn + k] * a.data<double>()[r * kIn + k];
        sum += z * b.data<double>()[o * kRank + r];
      }
      y.data<double>()[i * kOut + o] += kScale * sum;
    }
  }
  return y;
}

TEST(Lora, ForwardAddsTheScaledLowRankProduct) {
  const Tensor x = testing::Random({kN, kIn}, DType::kF64, 1);
  const Tensor a = testing::Random({kRank, kIn}, DType::kF64, 2);
  const Tensor b = testing::Random({kOut, kRank}, DType::kF64, 3);
  const Tensor y0 = testing::Random({kN, kOut}, DType::kF64, 4);
  Tensor y = testing::Cast(y0, DType::kF64), z = Tensor::Empty({kN, kRank}, DType::kF64);
  ops::LoraForward(Context::Cpu(), x, a, b, kScale, z, y);
  const Tensor expected = NaiveLora(x, a, b, y0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_NEAR(y.data<double>()[i], expected.data<double>()[i], testing::kF64RelTol * 10) << i;
  }
}

TEST(Lora, BackwardMatchesFiniteDifferences) {
  Tensor x = testing::Random({kN, kIn}, DType::kF64, 5);
  Tensor a = testing::Random({kRank, kIn}, DType::kF64, 6);
  Tensor b = testing::Random({kOut, kRank}, DType::kF64, 7);
  const Tensor dy = testing::Random({kN, kOut}, DType::kF64, 8);
  const Tensor y0 = testing::Random({kN, kOut}, DType::kF64, 9);
  auto loss = [&] { return testing::Dot(dy, NaiveLora(x, a, b, y0)); };
  const Context& ctx = Context::Cpu();
  Tensor z = Tensor::Empty({kN, kRank}, DType::kF64), y = testing::Cast(y0, DType::kF64);
  ops::LoraForward(ctx, x, a, b, kScale, z, y);
  // The gradients accumulate onto what they held.
  const Tensor dx0 = testing::Random({kN, kIn}, DType::kF64, 10);
  const Tensor da0 = testing::Random({kRank, kIn}, DType::kF64, 11);
  const Tensor db0 = testing::Random({kOut, kRank}, DType::kF64, 12);
  Tensor dx = testing::Cast(dx0, DType::kF64), da = testing::Cast(da0, DType::kF64),
         db = testing::Cast(db0, DType::kF64), dz = Tensor::Empty({kN, kRank}, DType::kF64);
  ops::LoraBackward(ctx, dy, x, a, b, z, kScale, dz, dx, da, db);
  auto minus = [](const Tensor& total, const Tensor& start) {
    Tensor out = testing::Cast(total, DType::kF64);
    for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] -= start.data<double>()[i];
    return out;
  };
  EXPECT_TRUE(testing::GradientMatches(loss, x, minus(dx, dx0), "dx"));
  EXPECT_TRUE(testing::GradientMatches(loss, a, minus(da, da0), "dA"));
  EXPECT_TRUE(testing::GradientMatches(loss, b, minus(db, db0), "dB"));

  // Frozen adapters: no dA or dB, the same dx.
  Tensor dx_frozen = testing::Cast(dx0, DType::kF64), no_da, no_db;
  ops::LoraBackward(ctx, dy, x, a, b, z, kScale, dz, dx_frozen, no_da, no_db);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    EXPECT_EQ(dx_frozen.data<double>()[i], dx.data<double>()[i]) << i;
  }
}

}  // namespace
}  // namespace kelvin
