// Llama with SSA attention (docs/ssa.md): with zero read-outs and no position term it is the
// vanilla model bit for bit (logits and gradients); with non-zero temperatures the whole model's
// backward matches f64 finite differences (weight sharing on and off, packed documents); the
// temperature statistics describe the last forward; SSA tensors survive export and import, and a
// checkpoint without them starts SSA at its initialisation. LoRA adapters: the merged model, their
// gradients (with dropout masks too), and dropout in the asked-for forwards alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/io/hf_checkpoint.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "models/llama/llama_model.h"
#include "models/llama/llama_peft.h"
#include "models/llama/memory_plan.h"
#include "tests/models/memory_plan_check.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using ::testing::HasSubstr;

// The tiny model without SSA.
models::LlamaConfig TinyConfig() {
  models::LlamaConfig c = testing::TinySsaLlamaConfig(true, true);
  c.ssa.reset();
  return c;
}

// Two rows of 6 tokens; the second packs two documents (positions restart).
Tensor PackedPositions() {
  Tensor p = Tensor::Empty({2, 6}, DType::kI32);
  const int32_t values[] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 12; ++i) p.data<int32_t>()[i] = values[i];
  return p;
}

// Copies every parameter `from` has into the same-named parameter of `to`.
void CopySharedParameters(models::LlamaModel& from, models::LlamaModel& to) {
  for (const ParameterSet::Entry& e : from.parameters().entries()) {
    Tensor dst = to.parameters().value(e.name);
    CopyTensor(Context::Cpu(), e.value, dst);
  }
}

// Mean cross-entropy of the model on (tokens, labels); with `backward` also the gradients.
double Loss(models::LlamaModel& model, const Tensor& tokens, const Tensor& positions,
            const Tensor& labels, bool backward) {
  const Context ctx = Context::Cpu();
  Tensor& logits = model.Forward(ctx, tokens, positions);
  const DType dtype = logits.dtype();
  Tensor token_loss = Tensor::Empty({logits.dim(0)}, dtype);
  const int64_t labelled = ops::CountNonIgnored(ctx, labels.View({-1}));
  if (!backward) {
    Tensor lse = Tensor::Empty({logits.dim(0)}, dtype);
    ops::CrossEntropyForward(ctx, logits, labels.View({-1}), token_loss, lse);
  } else {
    ops::SoftmaxCrossEntropy(ctx, logits, labels.View({-1}), 1.0 / static_cast<double>(labelled),
                             token_loss);
    model.Backward(ctx, logits);
  }
  const Tensor losses = testing::Cast(token_loss, DType::kF64);
  double sum = 0;
  for (int64_t i = 0; i < losses.numel(); ++i) sum += losses.data<double>()[i];
  return sum / static_cast<double>(labelled);
}

// Read-outs and alphas far from their initialisation, so every temperature term is active.
void RandomizeSsa(models::LlamaModel& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    if (e.group != ParamGroup::kTemperature) continue;
    for (int64_t i = 0; i < e.value.numel(); ++i) e.value.data<double>()[i] = normal(rng);
  }
}

// Every parameter at a scale where the model is far from linear and its gradients are large
// enough for finite differences to resolve (f64): matrices N(0, 0.3), norms 1 + N(0, 0.1),
// read-outs and alphas N(0, 0.5).
void RandomizeForGradientCheck(models::LlamaModel& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    for (int64_t i = 0; i < e.value.numel(); ++i) {
      const double z = normal(rng);
      e.value.data<double>()[i] = e.group == ParamGroup::kNoDecay       ? 1.0 + 0.1 * z
                                  : e.group == ParamGroup::kTemperature ? 0.5 * z
                                                                        : 0.3 * z;
    }
  }
}

// Central differences (f64, testing::kF64ModelFiniteDifferenceStep) of `loss` at 8 spread
// elements of `value` (all when fewer) against `analytic`, each within the model tolerance.
::testing::AssertionResult SampledGradientMatches(const std::function<double()>& loss, Tensor value,
                                                  const Tensor& analytic, const std::string& name) {
  constexpr double kStep = testing::kF64ModelFiniteDifferenceStep;
  const int64_t n = value.numel(), samples = std::min<int64_t>(n, 8);
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t i = (s * n / samples + s * 7) % n;
    double& x = value.data<double>()[i];
    const double saved = x;
    x = saved + kStep;
    const double up = loss();
    x = saved - kStep;
    const double down = loss();
    x = saved;
    const double numerical = (up - down) / (2 * kStep), got = analytic.data<double>()[i];
    if (std::abs(got - numerical) >
        testing::kF64ModelFiniteDifferenceAbsTol +
            testing::kF64ModelFiniteDifferenceRelTol * std::abs(numerical)) {
      return ::testing::AssertionFailure()
             << name << "[" << i << "]: analytic " << got << ", finite differences " << numerical;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(LlamaSsa, ZeroReadOutsWithoutPositionTermAreBitIdenticalToVanilla) {
  const models::LlamaConfig vanilla_config = TinyConfig();
  models::LlamaModel vanilla(vanilla_config, DType::kF32);
  vanilla.InitRandom(3);
  models::LlamaModel ssa(testing::TinySsaLlamaConfig(true, /*position_aware=*/false), DType::kF32);
  CopySharedParameters(vanilla, ssa);
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 5, 0, 10);
  const Tensor labels = testing::RandomInts({2, 6}, DType::kI32, 6, 0, 10);
  const Tensor positions = PackedPositions();

  const Context ctx = Context::Cpu();
  const Tensor vanilla_logits = testing::ToHost(vanilla.Forward(ctx, tokens, positions));
  const Tensor ssa_logits = testing::ToHost(ssa.Forward(ctx, tokens, positions));
  EXPECT_TRUE(testing::BitIdentical(ssa_logits, vanilla_logits, "logits"));

  Loss(vanilla, tokens, positions, labels, true);
  Loss(ssa, tokens, positions, labels, true);
  for (const ParameterSet::Entry& e : vanilla.parameters().entries()) {
    EXPECT_TRUE(testing::BitIdentical(ssa.parameters().grad(e.name), e.grad, e.name));
  }
}

class LlamaSsaGradient : public ::testing::TestWithParam<bool> {};

// Every parameter tensor of a 2-layer Llama+SSA (non-zero temperatures, packed documents) against
// central differences of the mean loss at sampled elements, in f64.
TEST_P(LlamaSsaGradient, WholeModelMatchesFiniteDifferences) {
  const bool weight_sharing = GetParam();
  models::LlamaModel model(testing::TinySsaLlamaConfig(weight_sharing, true), DType::kF64);
  RandomizeForGradientCheck(model, 11);
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 13, 0, 10);
  Tensor labels = testing::RandomInts({2, 6}, DType::kI32, 14, 0, 10);
  labels.data<int32_t>()[3] = ops::kIgnoreIndex;
  const Tensor positions = PackedPositions();

  model.parameters().ZeroGrads();
  Loss(model, tokens, positions, labels, true);
  auto loss = [&] { return Loss(model, tokens, positions, labels, false); };
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    EXPECT_TRUE(SampledGradientMatches(loss, e.value, e.grad, e.name));
  }
}

INSTANTIATE_TEST_SUITE_P(WeightSharing, LlamaSsaGradient, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Shared" : "OwnProjection";
                         });

// The tiny SSA model with LoRA (rank 2, alpha 3) beside all seven projections, training the
// adapters and SSA on a frozen base.
models::LlamaConfig TinyLoraConfig() {
  models::LlamaConfig c = testing::TinySsaLlamaConfig(true, true);
  c.lora = models::LoraOptions();
  c.lora->rank = 2;
  c.lora->alpha = 3.0;
  for (int t = 0; t < models::kNumLoraTargets; ++t) {
    c.lora->targets.push_back(static_cast<models::LoraTarget>(t));
  }
  c.trainable = models::TrainableSets();
  c.trainable->adapters = c.trainable->ssa = true;
  return c;
}

// The LoRA model starts as its base (B = 0: bit for bit), and with adapters set is the model
// whose weights are merged, W + s B A (f64, within rounding): the adapters' forward and scale.
TEST(LlamaLora, StartsAsTheBaseAndEqualsTheMergedModel) {
  models::LlamaModel lora(TinyLoraConfig(), DType::kF64);
  models::LlamaConfig base_config = testing::TinySsaLlamaConfig(true, true);
  models::LlamaModel base(base_config, DType::kF64);
  base.InitRandom(31);
  RandomizeSsa(base, 32);
  CopySharedParameters(base, lora);
  lora.InitLoraParameters(33);
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 34, 0, 10);
  const Context ctx = Context::Cpu();
  const Tensor base_logits = testing::ToHost(base.Forward(ctx, tokens, PackedPositions()));
  EXPECT_TRUE(testing::BitIdentical(testing::ToHost(lora.Forward(ctx, tokens, PackedPositions())),
                                    base_logits, "logits with B = 0"));

  const double scale = TinyLoraConfig().lora->Scale();
  ASSERT_EQ(scale, 1.5);
  std::mt19937_64 rng(35);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (int64_t layer = 0; layer < base_config.num_layers; ++layer) {
    for (int t = 0; t < models::kNumLoraTargets; ++t) {
      const std::string module =
          absl::StrCat("model.layers.", layer, ".",
                       models::LoraTargetModule(static_cast<models::LoraTarget>(t)));
      const Tensor a = lora.parameters().value(module + ".lora_A.weight");  // [r, in]
      const Tensor b = lora.parameters().value(module + ".lora_B.weight");  // [out, r]
      for (int64_t i = 0; i < b.numel(); ++i) b.data<double>()[i] = normal(rng);
      const Tensor w = base.parameters().value(module + ".weight");  // [out, in]
      const int64_t out = w.dim(0), in = w.dim(1), r = a.dim(0);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          double update = 0;
          for (int64_t k = 0; k < r; ++k) {
            update += b.data<double>()[o * r + k] * a.data<double>()[k * in + i];
          }
          w.data<double>()[o * in + i] += scale * update;
        }
      }
    }
  }
  EXPECT_TRUE(testing::AllClose(testing::ToHost(lora.Forward(ctx, tokens, PackedPositions())),
                                testing::ToHost(base.Forward(ctx, tokens, PackedPositions())),
                                1e-12, "logits against the merged model"));
}

// The adapters' and SSA's gradients through the whole model against f64 central differences; the
// frozen base has none.
TEST(LlamaLora, AdapterAndSsaGradientsMatchFiniteDifferences) {
  models::LlamaModel model(TinyLoraConfig(), DType::kF64);
  RandomizeForGradientCheck(model, 41);
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 42, 0, 10);
  const Tensor labels = testing::RandomInts({2, 6}, DType::kI32, 43, 0, 10);
  const Tensor positions = PackedPositions();
  model.parameters().ZeroGrads();
  Loss(model, tokens, positions, labels, true);
  auto loss = [&] { return Loss(model, tokens, positions, labels, false); };
  int trained = 0;
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    const bool trains = models::IsLoraParameter(e.name) || e.group == ParamGroup::kTemperature;
    EXPECT_EQ(e.grad.defined(), trains) << e.name;
    if (!e.grad.defined()) continue;
    ++trained;
    EXPECT_TRUE(SampledGradientMatches(loss, e.value, e.grad, e.name));
  }
  EXPECT_EQ(trained,
            2 * (2 * models::kNumLoraTargets + 3));  // per layer: A, B x 7, a^q, a^v, alpha
}

// TinyLoraConfig with LoRA dropout p (and `recompute`), its parameters as the gradient check sets
// them.
std::unique_ptr<models::LlamaModel> DropoutModel(double p, bool recompute = false) {
  models::LlamaConfig config = TinyLoraConfig();
  config.lora->dropout = p;
  auto model = std::make_unique<models::LlamaModel>(
      config, DType::kF64, models::LlamaParallelism{},
      models::LlamaRecompute{.attention = recompute, .mlp = recompute});
  RandomizeForGradientCheck(*model, 41);
  return model;
}

// With the dropout masks of one micro-batch (global samples 3 and 4 of seed 9), fixed because the
// loss's forwards draw them again: the adapters' and SSA's gradients against f64 central
// differences (A's through the masked input, x's through the mask again); recompute draws the
// same masks (the same bits).
TEST(LlamaLora, DropoutGradientsMatchFiniteDifferences) {
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 42, 0, 10);
  const Tensor labels = testing::RandomInts({2, 6}, DType::kI32, 43, 0, 10);
  const Tensor positions = PackedPositions();
  std::unique_ptr<models::LlamaModel> model = DropoutModel(0.4);
  model->SetLoraDropout(9, {3});
  model->parameters().ZeroGrads();
  Loss(*model, tokens, positions, labels, true);
  auto loss = [&] { return Loss(*model, tokens, positions, labels, false); };
  for (const ParameterSet::Entry& e : model->parameters().entries()) {
    if (!e.grad.defined()) continue;
    EXPECT_TRUE(SampledGradientMatches(loss, e.value, e.grad, e.name));
  }
  std::unique_ptr<models::LlamaModel> recomputed = DropoutModel(0.4, true);
  recomputed->SetLoraDropout(9, {3});
  recomputed->parameters().ZeroGrads();
  Loss(*recomputed, tokens, positions, labels, true);
  for (const ParameterSet::Entry& e : model->parameters().entries()) {
    if (!e.grad.defined()) continue;
    EXPECT_TRUE(testing::BitIdentical(recomputed->parameters().grad(e.name), e.grad, e.name));
  }
}

// A copy of the model's logits for `tokens` (the model reuses its buffer; a backward overwrites
// it).
Tensor LogitsOf(models::LlamaModel& model, const Tensor& tokens) {
  return testing::Cast(model.Forward(Context::Cpu(), tokens, PackedPositions()), DType::kF64);
}

// Dropout changes only the forwards SetLoraDropout asks for: without it (evaluation, generation)
// a model with p = 0.4 gives the logits of p = 0 bit for bit, and p = 0 with masks asked for
// gives them too (logits and gradients: today's model); p = 0.4 with masks gives others, and other
// samples other ones again.
TEST(LlamaLora, DropoutActsInTheAskedForwardsAlone) {
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 44, 0, 10);
  const Tensor labels = testing::RandomInts({2, 6}, DType::kI32, 45, 0, 10);
  std::unique_ptr<models::LlamaModel> none = DropoutModel(0.0), drops = DropoutModel(0.4);
  const Tensor logits = LogitsOf(*none, tokens);
  EXPECT_TRUE(testing::BitIdentical(LogitsOf(*drops, tokens), logits, "p 0.4 without masks"));
  none->parameters().ZeroGrads();
  Loss(*none, tokens, PackedPositions(), labels, true);
  std::unique_ptr<models::LlamaModel> zero = DropoutModel(0.0);
  zero->SetLoraDropout(9, {3});
  EXPECT_TRUE(testing::BitIdentical(LogitsOf(*zero, tokens), logits, "p 0 with masks asked for"));
  zero->parameters().ZeroGrads();
  Loss(*zero, tokens, PackedPositions(), labels, true);
  for (const ParameterSet::Entry& e : none->parameters().entries()) {
    if (!e.grad.defined()) continue;
    EXPECT_TRUE(testing::BitIdentical(zero->parameters().grad(e.name), e.grad, e.name));
  }
  drops->SetLoraDropout(9, {3});
  const Tensor dropped = LogitsOf(*drops, tokens);
  EXPECT_FALSE(testing::AllClose(dropped, logits, 1e-6, "p 0.4 with masks"));
  drops->SetLoraDropout(9, {4});
  EXPECT_FALSE(testing::AllClose(LogitsOf(*drops, tokens), dropped, 1e-6, "other samples"));
  drops->SetLoraDropout(0, {});
  EXPECT_TRUE(
      testing::BitIdentical(LogitsOf(*drops, tokens), logits, "p 0.4 after the masks are off"));
}

TEST(LlamaSsa, TemperatureStatisticsDescribeTheLastForward) {
  models::LlamaModel model(testing::TinySsaLlamaConfig(true, true), DType::kF64);
  model.InitRandom(21);
  RandomizeSsa(model, 22);
  EXPECT_TRUE(model.TemperatureStatistics().empty());  // no forward yet
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 23, 0, 10);
  model.Forward(Context::Cpu(), tokens, PackedPositions());
  const std::vector<ssa::TemperatureStatistics> stats = model.TemperatureStatistics();
  ASSERT_EQ(stats.size(), 2u);
  for (const ssa::TemperatureStatistics& layer : stats) {
    EXPECT_EQ(layer.query.count, 12 * 4);
    EXPECT_EQ(layer.value.count, 12 * 2);
    ASSERT_EQ(layer.sigma_alpha.size(), 4u);
    // tau^q in [sigma(alpha) ln n, 2 + sigma(alpha) ln n] with n <= 6, tau^v in [0, 2].
    EXPECT_GE(layer.query.min, 0.0);
    EXPECT_LE(layer.query.max, 2.0 + std::log(6.0));
    EXPECT_GT(layer.query.std, 0.0);
    EXPECT_GE(layer.value.min, 0.0);
    EXPECT_LE(layer.value.max, 2.0);
    EXPECT_GT(layer.value.std, 0.0);
  }
  models::LlamaModel vanilla(TinyConfig(), DType::kF64);
  EXPECT_TRUE(vanilla.TemperatureStatistics().empty());
}

TEST(LlamaSsa, ExportImportKeepsSsaTensorsAndAPlainCheckpointStartsAtInit) {
  const std::string dir = ::testing::TempDir() + "/llama_ssa_export";
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(false, true);
  models::LlamaModel trained(config, DType::kF32);
  trained.InitRandom(31);
  for (const ParameterSet::Entry& e : trained.parameters().entries()) {
    Tensor value = e.value;
    if (e.group == ParamGroup::kTemperature) ops::Fill(Context::Cpu(), value, 0.25);
  }
  ASSERT_TRUE(trained.ExportHf(dir).ok());
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  models::LlamaModel reloaded(config, DType::kF32);
  ASSERT_TRUE(reloaded.LoadHfCheckpoint(*checkpoint).ok());
  for (const ParameterSet::Entry& e : trained.parameters().entries()) {
    EXPECT_TRUE(testing::BitIdentical(reloaded.parameters().value(e.name), e.value, e.name));
  }

  // A vanilla checkpoint: SSA starts from read-outs 0, alpha_init, W_tmp = the W_q / W_v rows.
  models::LlamaModel plain(TinyConfig(), DType::kF32);
  plain.InitRandom(32);
  const std::string plain_dir = dir + "_plain";
  ASSERT_TRUE(plain.ExportHf(plain_dir).ok());
  absl::StatusOr<io::HfCheckpoint> plain_checkpoint = io::HfCheckpoint::Open(plain_dir);
  ASSERT_TRUE(plain_checkpoint.ok());
  models::LlamaModel started(config, DType::kF32);
  ASSERT_TRUE(started.LoadHfCheckpoint(*plain_checkpoint).ok());
  const std::string layer = "model.layers.1.self_attn.";
  EXPECT_EQ(started.parameters().value(layer + "ssa.alpha").data<float>()[2], -8.0f);
  EXPECT_EQ(started.parameters().value(layer + "ssa.query_readout").data<float>()[5], 0.0f);
  EXPECT_TRUE(testing::BitIdentical(
      started.parameters().value(layer + "ssa.value_temperature_proj.weight"),
      plain.parameters().value(layer + "v_proj.weight"), "W_tmp^v starts as W_v"));

  // A checkpoint with only some SSA tensors (other flags) is a clear error.
  models::LlamaModel both(testing::TinySsaLlamaConfig(true, true), DType::kF32);
  const std::string mixed_dir = dir + "_mixed";
  ssa::SsaOptions query_only;
  query_only.value_temperature = false;
  models::LlamaConfig query_config = TinyConfig();
  query_config.ssa = query_only;
  models::LlamaModel query_model(query_config, DType::kF32);
  ASSERT_TRUE(query_model.ExportHf(mixed_dir).ok());
  absl::StatusOr<io::HfCheckpoint> mixed = io::HfCheckpoint::Open(mixed_dir);
  ASSERT_TRUE(mixed.ok());
  const absl::Status status = both.LoadHfCheckpoint(*mixed);
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr("has some SSA tensors but not \"model.layers.0.self_attn.ssa.value_readout\""));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(plain_dir);
  std::filesystem::remove_all(mixed_dir);
}

TEST(LlamaSsa, MemoryPlanPredictsTheSsaBuffersExactly) {
  for (const bool weight_sharing : {true, false}) {
    const models::LlamaConfig config = testing::TinySsaLlamaConfig(weight_sharing, true);
    models::LlamaModel model(config, DType::kF32);
    model.InitRandom(41);
    model.Forward(Context::Cpu(), testing::RandomInts({2, 6}, DType::kI32, 42, 0, 10),
                  PackedPositions());
    SCOPED_TRACE(weight_sharing ? "weight sharing" : "own projections");
    testing::ExpectPlanMatchesAllocations(config, {2, 6}, model);
  }
}

// Activation recompute (attention, MLP, both) gives the logits and every gradient of keeping
// the activations, bit for bit, over two accumulated micro-batches, and allocates exactly what the
// memory plan says (less per layer, the recomputed buffers once).
TEST(LlamaSsa, RecomputeIsBitIdenticalAndPlanned) {
  const models::LlamaConfig config = testing::TinySsaLlamaConfig(/*weight_sharing=*/false, true);
  const Tensor tokens = testing::RandomInts({2, 6}, DType::kI32, 51, 0, 10);
  const Tensor labels = testing::RandomInts({2, 6}, DType::kI32, 52, 0, 10);
  auto train = [&](const models::LlamaRecompute& recompute) {
    auto model = std::make_unique<models::LlamaModel>(config, DType::kF64,
                                                      models::LlamaParallelism{}, recompute);
    model->InitRandom(53);
    RandomizeSsa(*model, 54);
    Loss(*model, tokens, PackedPositions(), labels, true);
    Loss(*model, labels, PackedPositions(), tokens, true);  // a second micro-batch accumulates
    return model;
  };
  const std::unique_ptr<models::LlamaModel> kept = train({});
  const models::MemoryPlan kept_plan = models::PlanLlamaMemory(config, {2, 6, DType::kF64});
  for (const models::LlamaRecompute recompute :
       {models::LlamaRecompute{true, false}, models::LlamaRecompute{false, true},
        models::LlamaRecompute{true, true}}) {
    SCOPED_TRACE(absl::StrCat("recompute attention ", recompute.attention, " mlp ", recompute.mlp));
    const std::unique_ptr<models::LlamaModel> recomputed = train(recompute);
    for (const ParameterSet::Entry& e : kept->parameters().entries()) {
      EXPECT_TRUE(
          testing::BitIdentical(recomputed->parameters().grad(e.name), e.grad, e.name + " grad"));
    }
    models::MemoryPlanOptions options{2, 6, DType::kF64, DType::kF64};
    options.recompute_attention = recompute.attention;
    options.recompute_mlp = recompute.mlp;
    testing::ExpectPlanMatchesAllocations(config, options, *recomputed);
    EXPECT_LT(models::PlanLlamaMemory(config, options).activations_per_layer,
              kept_plan.activations_per_layer);
    // The statistics survive the recomputation (computed in forward).
    const std::vector<ssa::TemperatureStatistics> a = kept->TemperatureStatistics(),
                                                  b = recomputed->TemperatureStatistics();
    ASSERT_EQ(a.size(), b.size());
    for (size_t l = 0; l < a.size(); ++l) {
      EXPECT_EQ(a[l].query.mean, b[l].query.mean);
      EXPECT_EQ(a[l].value.max, b[l].value.max);
    }
  }
}

TEST(LlamaSsa, ConfigValidationNamesTheSsaField) {
  models::LlamaConfig config = TinyConfig();
  ssa::SsaOptions options;
  options.temperature_clamp = ssa::TemperatureClamp{1.2, 1.1};
  config.ssa = options;
  EXPECT_THAT(std::string(models::ValidateLlamaConfig(config).message()),
              HasSubstr("model.ssa.temperature_clamp=[1.2, 1.1]"));
}

}  // namespace
}  // namespace kelvin
