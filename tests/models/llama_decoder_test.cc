// The KV-cache decoder against the training forward, for vanilla Llama and for SSA with non-zero
// read-outs and alphas, with and without weight sharing, with a clamp, with one temperature off
// and with the position term alone: prefill and one token at a time give the whole forward's
// logits, a batch of sequences of different lengths gives each sequence's logits as if it were
// decoded alone, the last tokens' logits are those rows, and bad inputs are errors. (On CUDA:
// llama_decoder_cuda_test.cc.)
#include "models/llama/llama_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/compare.h"
#include "tests/testing/tolerance.h"

namespace kelvin::models {
namespace {

using ::testing::HasSubstr;

struct DecoderCase {
  std::string name;
  bool ssa, weight_sharing, clamp;
  bool query_temperature = true, value_temperature = true, token_aware = true;
};

std::vector<DecoderCase> Cases() {
  return {{"vanilla", false, true, false},
          {"ssa", true, true, false},
          {"ssa_own_projection", true, false, false},
          {"ssa_clamp", true, true, true},
          {"ssa_own_projection_clamp", true, false, true},
          {"ssa_query_only", true, false, false, true, false},
          {"ssa_value_only", true, false, true, false, true},
          {"ssa_position_only", true, true, false, true, true, false}};
}

LlamaConfig ConfigOf(const DecoderCase& c) {
  LlamaConfig config = testing::TinySsaLlamaConfig(c.weight_sharing, /*position_aware=*/true);
  if (!c.ssa) {
    config.ssa.reset();
    return config;
  }
  if (c.clamp) config.ssa->temperature_clamp = ssa::TemperatureClamp{0.8, 1.3};
  config.ssa->query_temperature = c.query_temperature;
  config.ssa->value_temperature = c.value_temperature;
  config.ssa->token_aware = c.token_aware;
  return config;
}

// A random f64 model whose temperatures differ from 1.
LlamaModel RandomModel(const LlamaConfig& config) {
  LlamaModel model(config, DType::kF64);
  model.InitRandom(11);
  std::mt19937_64 rng(12);
  std::normal_distribution<double> normal(0.0, 0.7);
  for (const ParameterSet::Entry& e : model.parameters().entries()) {
    if (e.group != ParamGroup::kTemperature) continue;
    for (int64_t i = 0; i < e.value.numel(); ++i) e.value.data<double>()[i] = normal(rng);
  }
  return model;
}

class LlamaDecoderTest : public ::testing::TestWithParam<DecoderCase> {};

// A prefilled prompt and the same tokens appended one at a time give, at every position, the
// logits Forward computes on the whole sequence (f64: the same sums in another order).
TEST_P(LlamaDecoderTest, PrefillAndOneTokenAtATimeEqualTheWholeForward) {
  const LlamaConfig config = ConfigOf(GetParam());
  LlamaModel model = RandomModel(config);
  constexpr int64_t kTokens = 13;
  std::vector<int32_t> ids;
  Tensor tokens = Tensor::Empty({1, kTokens}, DType::kI32);
  Tensor positions = Tensor::Empty({1, kTokens}, DType::kI32);
  for (int64_t t = 0; t < kTokens; ++t) {
    ids.push_back(static_cast<int32_t>((7 * t + 3) % config.vocab_size));
    tokens.data<int32_t>()[t] = ids.back();
    positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  }
  const Tensor expected = model.Forward(Context::Cpu(), tokens, positions).View({kTokens, -1});

  absl::StatusOr<LlamaDecoder> decoder = LlamaDecoder::Create(model, 20);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  // A prompt of 5 prefilled, the rest one by one.
  absl::StatusOr<Tensor> prefill = decoder->Append({ids.begin(), ids.begin() + 5});
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_TRUE(testing::AllClose(*prefill, expected.Slice(0, 5), testing::kF64RelTol, "prefill"));
  for (int64_t t = 5; t < kTokens; ++t) {
    absl::StatusOr<Tensor> step = decoder->Append({ids[t]});
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_TRUE(testing::AllClose(*step, expected.Slice(t, t + 1), testing::kF64RelTol,
                                  "logits of token " + std::to_string(t)));
  }
  EXPECT_EQ(decoder->length(), kTokens);
  // Reset starts a new sequence: the first token's logits again.
  decoder->Reset();
  absl::StatusOr<Tensor> again = decoder->Append({ids[0]});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(testing::AllClose(*again, expected.Slice(0, 1), testing::kF64RelTol, "after reset"));
}

TEST_P(LlamaDecoderTest, ABatchOfSequencesOfDifferentLengthsEqualsEachAlone) {
  const LlamaConfig config = ConfigOf(GetParam());
  LlamaModel model = RandomModel(config);
  // Three sequences: prompts of 5, 2 and 7 tokens in one call, then calls that grow them unevenly
  // (a sequence left out of a call keeps its place).
  const std::vector<std::vector<int32_t>> ids = {
      {1, 4, 7, 10, 2, 5, 8, 11}, {3, 9, 6, 0, 1}, {2, 2, 7, 1, 8, 2, 8, 1, 8}};
  const std::vector<std::vector<int64_t>> calls = {{5, 2, 7}, {1, 0, 1}, {2, 1, 0}, {0, 2, 1}};
  std::vector<Tensor> expected;  // each sequence's whole forward, [n_b, V]
  for (const std::vector<int32_t>& sequence : ids) {
    const int64_t n = static_cast<int64_t>(sequence.size());
    Tensor tokens = Tensor::Empty({1, n}, DType::kI32);
    Tensor positions = Tensor::Empty({1, n}, DType::kI32);
    for (int64_t t = 0; t < n; ++t) {
      tokens.data<int32_t>()[t] = sequence[t];
      positions.data<int32_t>()[t] = static_cast<int32_t>(t);
    }
    expected.push_back(model.Forward(Context::Cpu(), tokens, positions).View({n, -1}));
  }
  absl::StatusOr<LlamaDecoder> decoder = LlamaDecoder::Create(model, 12, 3);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::vector<int64_t> done(3, 0);
  for (size_t call = 0; call < calls.size(); ++call) {
    std::vector<std::vector<int32_t>> batch(3);
    for (int64_t b = 0; b < 3; ++b) {
      batch[b].assign(ids[b].begin() + done[b], ids[b].begin() + done[b] + calls[call][b]);
    }
    absl::StatusOr<Tensor> logits = decoder->AppendBatch(batch);
    ASSERT_TRUE(logits.ok()) << logits.status();
    int64_t row = 0;
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t n = calls[call][b];
      EXPECT_TRUE(testing::AllClose(
          logits->Slice(row, row + n), expected[b].Slice(done[b], done[b] + n), testing::kF64RelTol,
          "call " + std::to_string(call) + " sequence " + std::to_string(b)));
      row += n;
      done[b] += n;
      EXPECT_EQ(decoder->length(b), done[b]);
    }
    EXPECT_EQ(logits->dim(0), row);
  }
  EXPECT_THAT(
      std::string(decoder->AppendBatch({{}, {1, 2, 3, 4, 5, 6, 7, 8}, {}}).status().message()),
      HasSubstr("appending 8 tokens to 5 of sequence 1 would exceed the decoder's 12"));
  EXPECT_THAT(std::string(decoder->AppendBatch({{1}, {2}}).status().message()),
              HasSubstr("tokens for 2 sequences: the decoder holds 3"));
}

// Asking for the logits of each sequence's last tokens gives those rows of every token's logits
// (the final norm and LM head run on them alone); fewer than one is an error.
TEST_P(LlamaDecoderTest, TheLastTokensLogitsAreThoseRows) {
  const LlamaConfig config = ConfigOf(GetParam());
  LlamaModel model = RandomModel(config);
  const std::vector<std::vector<int32_t>> prompts = {{1, 4, 7, 10, 2}, {3}, {2, 2, 7}};
  absl::StatusOr<LlamaDecoder> every = LlamaDecoder::Create(model, 8, 3);
  absl::StatusOr<LlamaDecoder> last = LlamaDecoder::Create(model, 8, 3);
  ASSERT_TRUE(every.ok() && last.ok());
  absl::StatusOr<Tensor> all_rows = every->AppendBatch(prompts);
  absl::StatusOr<Tensor> last_rows = last->AppendBatch(prompts, /*logit_rows=*/2);
  ASSERT_TRUE(all_rows.ok() && last_rows.ok());
  ASSERT_EQ(last_rows->dim(0), 2 + 1 + 2);
  // Rows 3, 4 of sequence 0, row 0 of sequence 1 and rows 1, 2 of sequence 2 among the 9.
  const std::vector<int64_t> picked = {3, 4, 5, 7, 8};
  for (int64_t r = 0; r < 5; ++r) {
    EXPECT_TRUE(testing::AllClose(last_rows->Slice(r, r + 1),
                                  all_rows->Slice(picked[r], picked[r] + 1), testing::kF64RelTol,
                                  "row " + std::to_string(r)));
  }
  EXPECT_EQ(last->length(0), 5);
  EXPECT_THAT(std::string(last->Append({1}, 0).status().message()),
              HasSubstr("the logits of the last 0 tokens: ask for at least 1"));
}

INSTANTIATE_TEST_SUITE_P(Variants, LlamaDecoderTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// An id outside the vocabulary, an empty append, a full cache and a cache longer than the model's
// positions are errors.
TEST(LlamaDecoder, BadTokensAFullCacheAndBadSizesAreErrors) {
  LlamaModel model = RandomModel(ConfigOf(Cases()[1]));
  absl::StatusOr<LlamaDecoder> decoder = LlamaDecoder::Create(model, 4);
  ASSERT_TRUE(decoder.ok());
  EXPECT_THAT(std::string(decoder->Append({1, 12}).status().message()),
              HasSubstr("token id 12 is outside the model's vocabulary [0, 12)"));
  EXPECT_THAT(std::string(decoder->Append({}).status().message()), HasSubstr("no tokens"));
  ASSERT_TRUE(decoder->Append({1, 2, 3}).ok());
  EXPECT_THAT(std::string(decoder->Append({4, 5}).status().message()),
              HasSubstr("appending 2 tokens to 3 would exceed the decoder's 4"));
  EXPECT_THAT(std::string(LlamaDecoder::Create(model, 33).status().message()),
              HasSubstr("the model's positions are [1, 32]"));
}

}  // namespace
}  // namespace kelvin::models
