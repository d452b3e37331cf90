// Golden parity with Hugging Face's LlamaForCausalLM (tools/make_llama_fixture.py): the same
// checkpoint and batch give the same logits and loss (1e-5), every parameter gradient (1e-4), and
// the losses of 5 AdamW steps (1e-5), in f32 on the CPU; for ordinary causal rows and for packed
// documents (position ids restart; HF was given the equivalent block-diagonal mask).
#include <gtest/gtest.h>

#include "core/copy.h"
#include "core/io/safetensors.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/reference/values.h"
#include "core/optim/adamw_optimizer.h"
#include "models/llama/llama_model.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

const std::string kFixture = std::string(KELVIN_FIXTURES_DIR) + "/llama_tiny";

// The fixture's int64 [B, T] tensor as i32.
Tensor ReadInts(const io::SafetensorsFile& file, const std::string& name) {
  absl::StatusOr<Tensor> t = file.Read(name);
  KELVIN_CHECK(t.ok()) << t.status().message();
  return testing::Cast(*t, DType::kI32);
}

Tensor ReadFloats(const io::SafetensorsFile& file, const std::string& name) {
  absl::StatusOr<Tensor> t = file.Read(name, DType::kF64);
  KELVIN_CHECK(t.ok()) << t.status().message();
  return *t;
}

models::LlamaModel LoadModel() {
  absl::StatusOr<models::LlamaConfig> config =
      models::LlamaConfigFromHfDirectory(kFixture + "/model");
  KELVIN_CHECK(config.ok()) << config.status().message();
  models::LlamaModel model(*config, DType::kF32);
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(kFixture + "/model");
  KELVIN_CHECK(checkpoint.ok()) << checkpoint.status().message();
  const absl::Status loaded = model.LoadHfCheckpoint(*checkpoint);
  KELVIN_CHECK(loaded.ok()) << loaded.message();
  return model;
}

class LlamaHfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaHfParity, LogitsLossAndEveryGradient) {
  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixture + "/" + GetParam() + ".safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const Tensor tokens = ReadInts(*golden, "input_ids");
  const Tensor labels = ReadInts(*golden, "labels");
  const Tensor positions = ReadInts(*golden, "position_ids");
  models::LlamaModel model = LoadModel();
  const Context ctx = Context::Cpu();

  Tensor& logits = model.Forward(ctx, tokens, positions);
  const Tensor expected_logits = ReadFloats(*golden, "logits");
  EXPECT_TRUE(testing::AllClose(logits, expected_logits.View(logits.shape()), testing::kF32RelTol,
                                "logits"));

  const double loss = ops::SoftmaxCrossEntropyMean(ctx, logits, labels.View({-1}));
  const double expected_loss = ReadFloats(*golden, "loss").data<double>()[0];
  EXPECT_NEAR(loss, expected_loss, testing::kF32RelTol * std::abs(expected_loss));
  model.Backward(ctx, logits);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    const Tensor expected = ReadFloats(*golden, "grad." + e.name);
    EXPECT_TRUE(
        testing::AllClose(e.grad, expected, testing::kF32ModelGradRelTol, "grad of " + e.name));
  }
}

TEST_P(LlamaHfParity, FiveAdamWStepsGiveTheSameLosses) {
  absl::StatusOr<io::SafetensorsFile> golden =
      io::SafetensorsFile::Open(kFixture + "/" + GetParam() + ".safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const Tensor tokens = ReadInts(*golden, "input_ids");
  const Tensor labels = ReadInts(*golden, "labels").View({-1});
  const Tensor positions = ReadInts(*golden, "position_ids");
  const Tensor expected = ReadFloats(*golden, "adamw_losses");
  models::LlamaModel model = LoadModel();
  AdamWOptimizer optimizer(model.parameters(), {0.9, 0.95, 1e-8, 0.1, 1.0});
  const Context ctx = Context::Cpu();
  for (int64_t step = 0; step < expected.numel(); ++step) {
    model.parameters().ZeroGrads();
    Tensor& logits = model.Forward(ctx, tokens, positions);
    const double loss = ops::SoftmaxCrossEntropyMean(ctx, logits, labels);
    EXPECT_NEAR(loss, expected.data<double>()[step],
                testing::kF32RelTol * expected.data<double>()[step])
        << "step " << step;
    model.Backward(ctx, logits);
    optimizer.Step(ctx, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaHfParity, ::testing::Values("plain", "packed"));

}  // namespace
}  // namespace kelvin
