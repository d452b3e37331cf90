// Mixed precision: f32 master weights with a bf16 model copy. On the CPU, the bookkeeping (the
// copy follows the masters through Assign and AdamW; a separate f32 master trains the model bit for
// bit like the plain one). On CUDA (skipped without a device), the bf16 Llama+SSA forward and
// backward follow the f32 CPU model on the same weights.
#include <gtest/gtest.h>

#include "core/copy.h"
#include "core/ops/cross_entropy.h"
#include "core/optim/adamw_optimizer.h"
#include "models/llama/llama_model.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

// Two packed documents per row: positions 0..first-1, then 0..t-first-1.
Tensor PackedPositions(int64_t rows, int64_t t, int64_t first) {
  Tensor p = Tensor::Empty({rows, t}, DType::kI32);
  for (int64_t i = 0; i < rows * t; ++i) {
    const int64_t col = i % t;
    p.data<int32_t>()[i] = static_cast<int32_t>(col < first ? col : col - first);
  }
  return p;
}

TEST(MasterWeights, Bf16ModelCopyFollowsF32Masters) {
  ParameterSet mixed, plain;
  for (ParameterSet* set : {&mixed, &plain}) {
    set->Declare("w", {3, 5}, ParamGroup::kDecay);
    set->Declare("norm", {5}, ParamGroup::kNoDecay);
  }
  mixed.Allocate(Context::Cpu(), DType::kBF16);
  plain.Allocate(DType::kF32);
  ASSERT_TRUE(mixed.has_model_copy());
  EXPECT_FALSE(plain.has_model_copy());
  EXPECT_EQ(mixed.value("w").dtype(), DType::kBF16);
  EXPECT_EQ(mixed.master("w").dtype(), DType::kF32);
  EXPECT_EQ(mixed.grad("w").dtype(), DType::kF32);
  EXPECT_EQ(plain.master("w").raw_data(), plain.value("w").raw_data());

  for (const char* name : {"w", "norm"}) {
    const Tensor init = testing::Random(mixed.Get(name).shape, DType::kF64, 7);
    mixed.Assign(name, init);
    plain.Assign(name, init);
    const Tensor grad = testing::Random(mixed.Get(name).shape, DType::kF32, 8);
    CopyTensor(Context::Cpu(), grad, mixed.grad(name));
    CopyTensor(Context::Cpu(), grad, plain.grad(name));
  }
  EXPECT_TRUE(testing::BitIdentical(mixed.master("w"), plain.value("w"), "master after Assign"));
  EXPECT_TRUE(testing::BitIdentical(mixed.value("w"), testing::Cast(plain.value("w"), DType::kBF16),
                                    "model copy after Assign"));

  AdamWOptimizer mixed_adam(mixed, {}), plain_adam(plain, {});
  for (int step = 0; step < 2; ++step) {
    mixed_adam.Step(Context::Cpu(), 1e-2);
    plain_adam.Step(Context::Cpu(), 1e-2);
  }
  for (const char* name : {"w", "norm"}) {
    EXPECT_TRUE(testing::BitIdentical(mixed.master(name), plain.value(name), name));
    EXPECT_TRUE(testing::BitIdentical(mixed.value(name),
                                      testing::Cast(plain.value(name), DType::kBF16), name));
    EXPECT_TRUE(testing::BitIdentical(mixed.MasterOnHost(name), plain.value(name), name));
  }
  // The state lives with the masters: f32.
  for (const OptimizerSpan& span : mixed_adam.StateSpans()) {
    EXPECT_EQ(span.master.dtype(), DType::kF32) << span.parameter;
    EXPECT_EQ(span.m.dtype(), DType::kF32) << span.parameter;
    EXPECT_EQ(span.v.dtype(), DType::kF32) << span.parameter;
  }
}

// ZeRO-1 beside a model copy: the whole masters exist only while placed in the gradient buffers
// (for the model to load them, for an export), and reading them otherwise is a clear error.
TEST(MasterWeights, ShardedMastersAreWholeOnlyInTheGradientBuffers) {
  ParameterSet set;
  set.Declare("w", {3, 5}, ParamGroup::kDecay);
  set.Allocate(Context::Cpu(), DType::kF32, /*separate_master=*/true, /*gradient_shards=*/2);
  ASSERT_TRUE(set.masters_sharded());
  ASSERT_TRUE(set.masters_whole());  // placed for loading
  EXPECT_EQ(set.master("w").raw_data(), set.grad("w").raw_data());
  const Tensor init = testing::Random({3, 5}, DType::kF32, 3);
  set.Assign("w", init);
  EXPECT_TRUE(testing::BitIdentical(set.value("w"), init, "model copy of the loaded masters"));
  EXPECT_EQ(set.WholeMasterBytes(), 0);  // the shards are the optimizer's
  EXPECT_DEATH(set.ZeroGrads(), "ZeroGrads while the gradient buffers hold the whole master");

  set.DropWholeMasters();
  EXPECT_FALSE(set.masters_whole());
  EXPECT_TRUE(testing::BitIdentical(set.grad("w"), Tensor::ZerosCpu({3, 5}, DType::kF32), "grads"));
  EXPECT_FALSE(set.Get("w").master.defined());
  EXPECT_DEATH(set.master("w"), "are sharded over the data-parallel ranks \\(ZeRO-1\\)");
  EXPECT_DEATH(set.MasterOnHost("w"), "DistributedAdamW::GatherMasters places them whole");
  EXPECT_DEATH(AdamWOptimizer(set, {}), "AdamWOptimizer needs whole master weights");
  set.ZeroGrads();  // gradients again

  set.PlaceWholeMastersInGradients();
  EXPECT_TRUE(set.masters_whole());
  EXPECT_EQ(set.master("w").raw_data(), set.grad("w").raw_data());
}

// A forward-only set (generation, scoring) holds its values alone: bf16 stays 2 bytes per
// parameter, Assign rounds into the values as a model copy of f32 masters would, and there are no
// gradients to read or zero.
TEST(MasterWeights, ForwardOnlyHoldsTheValuesAlone) {
  ParameterSet forward_only, training;
  for (ParameterSet* set : {&forward_only, &training}) {
    set->Declare("w", {3, 5}, ParamGroup::kDecay);
    set->Declare("t", {4}, ParamGroup::kTemperature);
  }
  forward_only.AllocateForwardOnly(Context::Cpu(), DType::kBF16);
  training.Allocate(Context::Cpu(), DType::kBF16);
  EXPECT_TRUE(forward_only.forward_only());
  EXPECT_FALSE(forward_only.has_model_copy());
  EXPECT_EQ(forward_only.WholeMasterBytes(), 0);
  for (const char* name : {"w", "t"}) {
    EXPECT_EQ(forward_only.value(name).dtype(), DType::kBF16);
    EXPECT_EQ(forward_only.master(name).raw_data(), forward_only.value(name).raw_data());
    EXPECT_FALSE(forward_only.grad(name).defined()) << name;
    const Tensor init = testing::Random(forward_only.Get(name).shape, DType::kF32, 5);
    forward_only.Assign(name, init);
    training.Assign(name, init);
    EXPECT_TRUE(testing::BitIdentical(forward_only.value(name), training.value(name), name));
  }
  for (const ParamGroup group :
       {ParamGroup::kDecay, ParamGroup::kNoDecay, ParamGroup::kTemperature}) {
    EXPECT_FALSE(forward_only.grads(group).defined());
  }
  forward_only.ZeroGrads();  // nothing to zero
}

TEST(MasterWeights, AForwardOnlyModelGivesTheLogitsAndRefusesABackward) {
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(true, true);
  models::LlamaModel trained(config, DType::kF32);
  models::LlamaModel forward_only(config, DType::kF32, {}, {},
                                  {.ctx = Context::Cpu(), .forward_only = true});
  trained.InitRandom(11);
  for (const ParameterSet::Entry& e : trained.parameters().entries()) {
    forward_only.parameters().Assign(e.name, e.value);
  }
  const Tensor tokens = testing::RandomInts({2, 8}, DType::kI32, 1, 0, 11);
  const Tensor positions = PackedPositions(2, 8, 3);
  const Tensor expected = testing::Cast(trained.Forward(Context::Cpu(), tokens, positions),
                                        DType::kF32);  // a copy
  Tensor& logits = forward_only.Forward(Context::Cpu(), tokens, positions);
  EXPECT_TRUE(testing::BitIdentical(logits, expected, "logits"));
  EXPECT_DEATH(forward_only.Backward(Context::Cpu(), logits), "a forward-only model");
}

// Two steps of forward, backward and AdamW on `model` from random weights with SSA.
void TrainTwoSteps(models::LlamaModel& model) {
  const Context ctx = Context::Cpu();
  model.InitRandom(11);
  const Tensor tokens = testing::RandomInts({2, 8}, DType::kI32, 1, 0, 11);
  const Tensor labels = testing::RandomInts({16}, DType::kI32, 2, 0, 11);
  AdamWOptimizer adam(model.parameters(), {});
  for (int step = 0; step < 2; ++step) {
    model.parameters().ZeroGrads();
    Tensor& logits = model.Forward(ctx, tokens, PackedPositions(2, 8, 3));
    ops::SoftmaxCrossEntropyMean(ctx, logits, labels);
    model.Backward(ctx, logits);
    adam.Step(ctx, 1e-2);
  }
}

TEST(MasterWeights, SeparateF32MastersTrainBitIdentically) {
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(true, true);
  models::LlamaModel plain(config, DType::kF32);
  models::LlamaModel separate(config, DType::kF32, {}, {}, {Context::Cpu(), true});
  ASSERT_TRUE(separate.parameters().has_model_copy());
  TrainTwoSteps(plain);
  TrainTwoSteps(separate);
  for (const ParameterSet::Entry& e : separate.parameters().entries()) {
    const ParameterSet::Entry& expected = plain.parameters().Get(e.name);
    EXPECT_TRUE(testing::BitIdentical(e.master, expected.value, e.name + " master"));
    EXPECT_TRUE(testing::BitIdentical(e.value, expected.value, e.name + " model copy"));
    EXPECT_TRUE(testing::BitIdentical(e.grad, expected.grad, e.name + " gradient"));
  }
}

// bf16 on CUDA against f32 on the CPU, same weights (non-zero temperatures) and packed inputs.
// Tolerances (relative L2): bf16 keeps 8 significant bits (unit roundoff 2^-9); every GEMM, norm
// and the attention round their outputs once, so two layers give errors of ~1e-2 on the logits and
// a few 1e-2 on the gradients, which reduce over all tokens.
TEST(LlamaCuda, Bf16ForwardBackwardFollowsCpuF32) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const Context cpu = Context::Cpu();
  const Context& gpu = testing::ContextFor(Device::Cuda());
  const models::LlamaConfig config = testing::CudaSizedSsaLlamaConfig(true, true);
  models::LlamaModel reference(config, DType::kF32);
  models::LlamaModel model(config, DType::kBF16, {}, {}, {gpu, false});
  ASSERT_TRUE(model.parameters().has_model_copy());
  reference.InitRandom(5);
  uint64_t seed = 100;
  for (const ParameterSet::Entry& e : reference.parameters().entries()) {
    Tensor weights = reference.parameters().MasterOnHost(e.name);
    if (e.group == ParamGroup::kTemperature) {  // non-zero read-outs and alphas
      weights = testing::Random(e.shape, DType::kF32, ++seed, -0.5, 0.5);
      reference.parameters().Assign(e.name, weights);
    }
    model.parameters().Assign(e.name, weights);
  }
  const int64_t rows = 2, t = 96;
  const Tensor tokens = testing::RandomInts({rows, t}, DType::kI32, 3, 0, config.vocab_size - 1);
  const Tensor positions = PackedPositions(rows, t, 40);
  Tensor labels = testing::RandomInts({rows * t}, DType::kI32, 4, 0, config.vocab_size - 1);
  for (int64_t i = 0; i < rows * t; i += 7) labels.data<int32_t>()[i] = ops::kIgnoreIndex;

  Tensor& expected_logits = reference.Forward(cpu, tokens, positions);
  Tensor& logits = model.Forward(gpu, tokens, positions);
  EXPECT_TRUE(
      testing::AllClose(logits, expected_logits, testing::kBf16ModelLogitsRelTol, "logits"));
  const double expected_loss = ops::SoftmaxCrossEntropyMean(cpu, expected_logits, labels);
  const double loss =
      ops::SoftmaxCrossEntropyMean(gpu, logits, CopyToDevice(gpu, labels, gpu.device()));
  EXPECT_NEAR(loss, expected_loss, testing::kBf16ModelLossRelTol * expected_loss);
  reference.Backward(cpu, expected_logits);
  model.Backward(gpu, logits);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    EXPECT_EQ(e.grad.dtype(), DType::kF32) << e.name;
    EXPECT_TRUE(testing::AllClose(e.grad, reference.parameters().Get(e.name).grad,
                                  testing::kBf16ModelGradRelTol, e.name));
  }
  const std::vector<ssa::TemperatureStatistics> stats = model.TemperatureStatistics();
  const std::vector<ssa::TemperatureStatistics> expected_stats = reference.TemperatureStatistics();
  ASSERT_EQ(stats.size(), expected_stats.size());
  for (size_t l = 0; l < stats.size(); ++l) {
    EXPECT_NEAR(stats[l].query.mean, expected_stats[l].query.mean,
                testing::kBf16ModelTemperatureAbsTol)
        << "layer " << l;
    EXPECT_NEAR(stats[l].value.mean, expected_stats[l].value.mean,
                testing::kBf16ModelTemperatureAbsTol)
        << "layer " << l;
  }
}

}  // namespace
}  // namespace kelvin
