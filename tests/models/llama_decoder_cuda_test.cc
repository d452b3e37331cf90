// The KV-cache decoder on CUDA in bf16 (every case skips without a GPU, saying why): a batch of
// prompts of different lengths prefilled, then decoded a token at a time as sequences drop out,
// gives at every position the logits of the f64 model holding the same weights within twice the
// error of the bf16 training forward of the whole sequence on the same device (docs/design.md, bf16
// rule), SSA on and off (greedy generation on CUDA: tests/inference/generation_loop_cuda_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/llama/llama_decoder.h"
#include "models/llama/llama_pipeline_stage.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::models {
namespace {

struct DecoderCase {
  std::string name;
  bool ssa, weight_sharing;
};

// The same weights three ways: random in f32 on the CPU (the read-outs and alphas normal(0, 0.7),
// so the temperatures differ from 1), that model in bf16 on CUDA, and in f64 on the CPU holding
// exactly the bf16 values (the reference sees what the device computes with).
struct ModelsOnBothDevices {
  std::unique_ptr<LlamaModel> cpu_f32, cuda_bf16, reference_f64;
};

ModelsOnBothDevices MakeModels(const LlamaConfig& config) {
  const Context& gpu = testing::ContextFor(Device::Cuda());
  ModelsOnBothDevices m{std::make_unique<LlamaModel>(config, DType::kF32),
                        std::make_unique<LlamaModel>(config, DType::kBF16, LlamaParallelism{},
                                                     LlamaRecompute{}, LlamaPlacement{.ctx = gpu}),
                        std::make_unique<LlamaModel>(config, DType::kF64)};
  m.cpu_f32->InitRandom(11);
  std::mt19937_64 rng(12);
  std::normal_distribution<double> normal(0.0, 0.7);
  for (const ParameterSet::Entry& e : m.cpu_f32->parameters().entries()) {
    if (e.group == ParamGroup::kTemperature) {
      for (int64_t i = 0; i < e.value.numel(); ++i) e.value.data<float>()[i] = normal(rng);
    }
    m.cuda_bf16->parameters().Assign(e.name, e.value);
    m.reference_f64->parameters().Assign(
        e.name, testing::Cast(m.cuda_bf16->parameters().Get(e.name).value, DType::kF64));
  }
  return m;
}

// [n, V] f64 host logits of `model`'s training forward over the whole of `ids` (one row).
Tensor ForwardLogits(LlamaModel& model, const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor tokens = Tensor::Empty({1, n}, DType::kI32),
         positions = Tensor::Empty({1, n}, DType::kI32);
  for (int64_t t = 0; t < n; ++t) {
    tokens.data<int32_t>()[t] = ids[t];
    positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  }
  return testing::Cast(model.Forward(model.context(), tokens, positions), DType::kF64);
}

// The bf16 rule for a sequence's decoded logits [n, V]: their relative error against the f64
// reference at most kLowPrecisionErrorRatio x that of the bf16 training forward of the whole
// sequence (the naive same-precision computation) on the same device.
::testing::AssertionResult WithinTwiceTheFullForward(const Tensor& decoded, const Tensor& full,
                                                     const Tensor& expected,
                                                     const std::string& what) {
  const testing::ErrorReport error = testing::CompareTensors(decoded, expected);
  const double full_error = testing::CompareTensors(full, expected).rel_error;
  const double limit = testing::kLowPrecisionErrorRatio * full_error;
  ::testing::AssertionResult result = error.has_nan || !(error.rel_error <= limit)
                                          ? ::testing::AssertionFailure()
                                          : ::testing::AssertionSuccess();
  return result << what << ": decoded relative error " << error.rel_error
                << " (largest at flat index " << error.max_index << ": " << error.actual_at_max
                << " vs f64 " << error.expected_at_max << "), the full bf16 forward's "
                << full_error << ", limit " << limit
                << (error.has_nan ? ", non-finite values" : "");
}

class LlamaDecoderCuda : public ::testing::TestWithParam<DecoderCase> {};

TEST_P(LlamaDecoderCuda, IncrementalDecodingFollowsTheFullForwardWithinTheBf16Rule) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  LlamaConfig config = testing::CudaSizedSsaLlamaConfig(GetParam().weight_sharing, true);
  if (!GetParam().ssa) config.ssa.reset();
  ModelsOnBothDevices models = MakeModels(config);
  // Prompts of 70 (two query tiles of the kernel, keys past one key tile), 3 and 33 tokens
  // prefilled in one call, then a token per call: sequence 1 stops after 5, the others after 8.
  const std::vector<int64_t> prompts = {70, 3, 33}, decoded = {8, 5, 8};
  std::vector<std::vector<int32_t>> ids(3);
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t t = 0; t < prompts[b] + decoded[b]; ++t) {
      ids[b].push_back(static_cast<int32_t>((7 * t + 13 * b + 1) % config.vocab_size));
    }
  }
  absl::StatusOr<LlamaDecoder> decoder = LlamaDecoder::Create(*models.cuda_bf16, 80, 3);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::vector<Tensor> rows(3);  // [n_b, V] f64: every position's decoded logits
  for (int64_t b = 0; b < 3; ++b) {
    rows[b] =
        Tensor::ZerosCpu({static_cast<int64_t>(ids[b].size()), config.vocab_size}, DType::kF64);
  }
  for (int64_t step = 0;; ++step) {
    std::vector<std::vector<int32_t>> call(3);
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t total = prompts[b] + decoded[b];
      const int64_t begin = step == 0 ? 0 : std::min(prompts[b] + step - 1, total);
      const int64_t end = step == 0 ? prompts[b] : std::min(begin + 1, total);
      call[b].assign(ids[b].begin() + begin, ids[b].begin() + end);
    }
    if (step > 0 && call[0].empty() && call[1].empty() && call[2].empty()) break;
    absl::StatusOr<Tensor> logits = decoder->AppendBatch(call);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_TRUE(logits->device().is_cuda());
    const Tensor host = testing::Cast(*logits, DType::kF64);
    int64_t row = 0;
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t n = static_cast<int64_t>(call[b].size()), first = decoder->length(b) - n;
      std::copy(host.data<double>() + row * config.vocab_size,
                host.data<double>() + (row + n) * config.vocab_size,
                rows[b].data<double>() + first * config.vocab_size);
      row += n;
    }
  }
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(decoder->length(b), static_cast<int64_t>(ids[b].size()));
    const Tensor expected = ForwardLogits(*models.reference_f64, ids[b]);
    const Tensor full = ForwardLogits(*models.cuda_bf16, ids[b]);
    EXPECT_TRUE(
        WithinTwiceTheFullForward(rows[b], full, expected, "sequence " + std::to_string(b)));
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, LlamaDecoderCuda,
                         ::testing::Values(DecoderCase{"vanilla", false, true},
                                           DecoderCase{"ssa", true, true},
                                           DecoderCase{"ssa_own_projection", true, false}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kelvin::models
