// The Optimizer interface: AdamW on whole replicas and ZeRO-1 over a group of one rank (a
// self-communicator, its shards filled by GradientBuckets) take the same steps bit for bit, norms
// and clipping included.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/optim/adamw_optimizer.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/distributed_adamw.h"
#include "parallel/gradient_buckets.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"

namespace kelvin::parallel {
namespace {

// One parameter of each group, with the same values in every set this makes.
std::unique_ptr<ParameterSet> ThreeGroups() {
  auto params = std::make_unique<ParameterSet>();
  params->Declare("w", {4, 5}, ParamGroup::kDecay);
  params->Declare("norm", {5}, ParamGroup::kNoDecay);
  params->Declare("temperature", {3}, ParamGroup::kTemperature);
  params->Allocate(DType::kF32);
  uint64_t seed = 1;
  for (const ParameterSet::Entry& e : params->entries()) {
    params->Assign(e.name, testing::Random(e.shape, DType::kF32, seed++));
  }
  return params;
}

// Gradients of step `step`, the same in every set (frozen parameters have none).
void FillGradients(ParameterSet& params, int step) {
  uint64_t seed = 100 * static_cast<uint64_t>(step + 1);
  for (const ParameterSet::Entry& e : params.entries()) {
    if (!e.trainable) continue;
    Tensor grad = params.grad(e.name);
    CopyTensor(Context::Cpu(), testing::Random(e.shape, DType::kF32, seed++), grad);
  }
}

// ThreeGroups with a frozen matrix beside them, in `dtype` (bf16: f32 masters apart).
std::unique_ptr<ParameterSet> WithFrozenBase(DType dtype) {
  auto params = std::make_unique<ParameterSet>();
  params->Declare("base", {6, 5}, ParamGroup::kDecay, /*trainable=*/false);
  params->Declare("w", {4, 5}, ParamGroup::kDecay);
  params->Declare("norm", {5}, ParamGroup::kNoDecay);
  params->Declare("temperature", {3}, ParamGroup::kTemperature);
  params->Allocate(Context::Cpu(), dtype);
  uint64_t seed = 1;
  for (const ParameterSet::Entry& e : params->entries()) {
    params->Assign(e.name, testing::Random(e.shape, DType::kF32, seed++));
  }
  return params;
}

// A frozen parameter holds its values alone (bf16 model: no f32 master, no gradient, no moments),
// keeps them through AdamW and ZeRO-1 steps, counts in no gradient norm and no bucket; the
// trainable ones step alike under both optimizers.
TEST(OptimizerTest, AFrozenParameterHasNoStateAndKeepsItsValues) {
  const AdamWSettings settings{0.9, 0.95, 1e-8, 0.1, 0.5};
  std::unique_ptr<ParameterSet> bf16 = WithFrozenBase(DType::kBF16);
  const ParameterSet::Entry& base = bf16->Get("base");
  EXPECT_FALSE(base.trainable);
  EXPECT_FALSE(base.grad.defined());
  EXPECT_EQ(base.master.raw_data(), base.value.raw_data());  // its own master, in bf16
  EXPECT_EQ(base.value.dtype(), DType::kBF16);
  EXPECT_EQ(bf16->NumElements(), 30 + 20 + 5 + 3);
  EXPECT_EQ(bf16->NumTrainableElements(), 20 + 5 + 3);
  EXPECT_EQ(bf16->WholeMasterBytes(), (20 + 5 + 3) * 4);
  AdamWOptimizer bf16_adamw(*bf16, settings);
  EXPECT_EQ(bf16_adamw.StateBytes(), (20 + 5 + 3) * 4 * 2);
  for (const OptimizerSpan& span : bf16_adamw.StateSpans()) EXPECT_NE(span.parameter, "base");
  const Tensor bf16_before = testing::ToHost(bf16->value("base"));

  std::unique_ptr<ParameterSet> whole = WithFrozenBase(DType::kF32),
                                sharded = WithFrozenBase(DType::kF32);
  const Tensor before = testing::ToHost(whole->value("base"));
  SelfCommunicator self("dp_cp", 0, Context::Cpu());
  AdamWOptimizer adamw(*whole, settings);
  DistributedAdamW zero(*sharded, settings, self);
  const std::vector<GradientBucket> buckets =
      PlanGradientBuckets(*sharded, {{"base", "w"}, {"norm", "temperature"}}, 1);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].elements, 20);  // w alone
  GradientBuckets into_shards(*sharded, self, buckets, /*overlap=*/true, &zero);
  const CountsTowardsNorm all = [](const std::string&) { return true; };
  for (int step = 0; step < 2; ++step) {
    FillGradients(*bf16, step);
    FillGradients(*whole, step);
    FillGradients(*sharded, step);
    into_shards.Finished(1);
    into_shards.Finished(0);
    into_shards.Wait();
    const double squares = adamw.GradientSumOfSquares(all);
    EXPECT_GT(squares, 0.0);
    EXPECT_EQ(squares, zero.GradientSumOfSquares(all));
    EXPECT_EQ(squares, bf16_adamw.GradientSumOfSquares(all));
    for (Optimizer* optimizer : std::vector<Optimizer*>{&adamw, &zero, &bf16_adamw}) {
      optimizer->Step(Context::Cpu(), 1e-2);
    }
    for (ParameterSet* params : {bf16.get(), whole.get(), sharded.get()}) params->ZeroGrads();
  }
  EXPECT_TRUE(testing::BitIdentical(bf16->value("base"), bf16_before, "bf16 base"));
  for (const ParameterSet::Entry& e : whole->entries()) {
    EXPECT_TRUE(testing::BitIdentical(sharded->value(e.name), e.value, e.name));
  }
  EXPECT_TRUE(testing::BitIdentical(whole->value("base"), before, "base"));
  EXPECT_FALSE(
      testing::BitIdentical(whole->value("w"), testing::Random({4, 5}, DType::kF32, 2), "w"));
}

TEST(OptimizerTest, ZeroOneOverOneRankStepsAsAdamW) {
  const AdamWSettings settings{0.9, 0.95, 1e-8, 0.1, 0.5};
  std::unique_ptr<ParameterSet> whole = ThreeGroups(), sharded = ThreeGroups();
  SelfCommunicator self("dp_cp", 0, Context::Cpu());
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  optimizers.push_back(std::make_unique<AdamWOptimizer>(*whole, settings));
  auto zero = std::make_unique<DistributedAdamW>(*sharded, settings, self);
  GradientBuckets into_shards(*sharded, self,
                              PlanGradientBuckets(*sharded, {{"w"}, {"norm", "temperature"}}, 1),
                              /*overlap=*/true, zero.get());
  optimizers.push_back(std::move(zero));
  EXPECT_FALSE(optimizers[0]->ShardsState());
  EXPECT_TRUE(optimizers[1]->ShardsState());
  const CountsTowardsNorm not_temperature = [](const std::string& name) {
    return name != "temperature";
  };
  for (int step = 0; step < 3; ++step) {
    double squares[2] = {};
    for (int o = 0; o < 2; ++o) {
      ParameterSet& params = o == 0 ? *whole : *sharded;
      FillGradients(params, step);
      if (o == 1) {
        into_shards.Finished(1);
        into_shards.Finished(0);
        into_shards.Wait();
      }
      squares[o] = optimizers[o]->GradientSumOfSquares(not_temperature);
      optimizers[o]->ScaleGradients(0.5);
      optimizers[o]->Step(Context::Cpu(), 1e-2);
      params.ZeroGrads();
    }
    EXPECT_GT(squares[0], 0.0);
    EXPECT_EQ(squares[0], squares[1]) << "step " << step;
    for (const ParameterSet::Entry& e : whole->entries()) {
      EXPECT_TRUE(testing::BitIdentical(sharded->value(e.name), e.value, e.name));
    }
  }
  for (const auto& optimizer : optimizers) {
    EXPECT_EQ(optimizer->steps_taken(), 3);
    EXPECT_EQ(optimizer->StateSpans().size(), 3u);  // one span per parameter
    EXPECT_EQ(optimizer->StateBytes(), 2 * (20 + 5 + 3) * 4);
  }
}

}  // namespace
}  // namespace kelvin::parallel
