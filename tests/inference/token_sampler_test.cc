// The token sampler and the generation loop: greedy is the argmax; top-k 1 and a tiny top-p are
// greedy at any temperature; a seed repeats its draws and another seed differs; the draws follow
// softmax(logits / T) over the kept tokens (10,000 draws of a fixed seed, within 3 standard
// errors); log-probabilities are the model's; generation stops at an eos id, a stop condition or
// the budget, and a prompt that does not fit is an error.
#include "inference/token_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "inference/generation_loop.h"
#include "tests/models/tiny_ssa_llama.h"
#include "tests/testing/tolerance.h"

namespace kelvin::inference {
namespace {

using ::testing::HasSubstr;

Tensor Row(const std::vector<double>& logits) {
  Tensor row = Tensor::Empty({static_cast<int64_t>(logits.size())}, DType::kF64);
  std::copy(logits.begin(), logits.end(), row.data<double>());
  return row;
}

TEST(TokenSampler, GreedyTopKOneAndTinyTopPTakeTheArgmax) {
  const Tensor row = Row({0.1, 2.0, -1.0, 1.9});
  const double log_sum = std::log(std::exp(0.1) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.9));
  for (const SamplingOptions& options :
       {SamplingOptions{0.0, 0, 1.0, 1}, SamplingOptions{5.0, 1, 1.0, 2},
        SamplingOptions{5.0, 0, 1e-9, 3}}) {
    TokenSampler sampler(options);
    for (int i = 0; i < 20; ++i) {
      const SampledToken token = sampler.Next(row);
      EXPECT_EQ(token.token, 1);
      EXPECT_NEAR(token.logprob, 2.0 - log_sum, testing::kClosedFormAbsTol);
    }
  }
}

TEST(TokenSampler, DrawsFollowTheTemperedSoftmaxOfTheKeptTokens) {
  const Tensor row = Row({1.0, 0.0, 2.0, -3.0, 0.5});
  const SamplingOptions options{0.7, 3, 1.0, 42};  // keeps tokens 2, 0, 4
  std::vector<double> expected(5, 0.0);
  double total = 0;
  for (const int t : {2, 0, 4}) total += std::exp(row.data<double>()[t] / 0.7);
  for (const int t : {2, 0, 4}) expected[t] = std::exp(row.data<double>()[t] / 0.7) / total;
  TokenSampler sampler(options);
  constexpr int kDraws = 10000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sampler.Next(row).token];
  for (int t = 0; t < 5; ++t) {
    const double p = expected[t], error = std::sqrt(p * (1 - p) / kDraws);
    EXPECT_NEAR(counts[t] / static_cast<double>(kDraws), p, 3 * error + 1e-12) << "token " << t;
  }
  // The same seed repeats its tokens; another seed does not.
  TokenSampler again(options), other(SamplingOptions{0.7, 3, 1.0, 43});
  TokenSampler first(options);
  int same = 0, differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t a = first.Next(row).token;
    same += a == again.Next(row).token;
    differ += a != other.Next(row).token;
  }
  EXPECT_EQ(same, 200);
  EXPECT_GT(differ, 20);
}

// Ids outside the allowed set (a tokenizer's gaps) are never drawn, greedy or sampled, whatever
// their logits; the log-probabilities stay the model's over every id.
TEST(TokenSampler, DisallowedIdsAreNeverDrawn) {
  const Tensor row = Row({0.1, 2.0, -1.0, 1.9, 3.0});
  double sum = 0;
  for (const double x : {0.1, 2.0, -1.0, 1.9, 3.0}) sum += std::exp(x);
  const auto allowed = std::make_shared<const std::vector<uint8_t>>(
      std::vector<uint8_t>{1, 0, 1, 1});  // 1 and 4 (beyond the set) are not allowed
  TokenSampler greedy(SamplingOptions{}, allowed);
  const SampledToken best = greedy.Next(row);
  EXPECT_EQ(best.token, 3);
  EXPECT_NEAR(best.logprob, 1.9 - std::log(sum), testing::kClosedFormAbsTol);
  SamplingOptions hot;
  hot.temperature = 10;  // nearly uniform: every allowed id comes up
  TokenSampler sampler(hot, allowed);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 2000; ++i) ++counts[sampler.Next(row).token];
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[4], 0);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_GT(counts[3], 0);
  hot.top_k = 1;  // top-k counts among the allowed ids
  EXPECT_EQ(TokenSampler(hot, allowed).Next(row).token, 3);
}

TEST(TokenSampler, BadSettingsAreErrorsNamingTheFlag) {
  EXPECT_THAT(std::string(ValidateSamplingOptions({-1, 0, 1, 0}).message()),
              HasSubstr("--temperature -1: must be >= 0"));
  EXPECT_THAT(std::string(ValidateSamplingOptions({1, -2, 1, 0}).message()),
              HasSubstr("--top-k -2: must be >= 0"));
  EXPECT_THAT(std::string(ValidateSamplingOptions({1, 0, 0, 0}).message()),
              HasSubstr("--top-p 0: must be in (0, 1]"));
}

TEST(Generate, StopsAtEosAStopConditionOrTheBudget) {
  models::LlamaModel model(testing::TinySsaLlamaConfig(true, true), DType::kF32);
  model.InitRandom(3);
  absl::StatusOr<models::LlamaDecoder> decoder = models::LlamaDecoder::Create(model, 32);
  ASSERT_TRUE(decoder.ok());
  GenerationRequest request;
  request.prompt = {1, 2, 3};
  request.max_new_tokens = 6;
  absl::StatusOr<GenerationResult> free_run = Generate(*decoder, request);
  ASSERT_TRUE(free_run.ok()) << free_run.status();
  EXPECT_EQ(free_run->tokens.size(), 6u);
  EXPECT_EQ(free_run->logprobs.size(), 6u);
  EXPECT_EQ(free_run->finish_reason, "length");
  // The third greedy token as an eos id: generated, then the stop.
  request.stop_ids = {free_run->tokens[2]};
  absl::StatusOr<GenerationResult> eos = Generate(*decoder, request);
  ASSERT_TRUE(eos.ok());
  const auto first_eos =
      std::find(free_run->tokens.begin(), free_run->tokens.end(), free_run->tokens[2]);
  EXPECT_EQ(eos->tokens, std::vector<int32_t>(free_run->tokens.begin(), first_eos + 1));
  EXPECT_EQ(eos->finish_reason, "eos");
  request.stop_ids.clear();
  request.stop_after = [](const std::vector<int32_t>& tokens) { return tokens.size() == 2; };
  absl::StatusOr<GenerationResult> stopped = Generate(*decoder, request);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->tokens.size(), 2u);
  EXPECT_EQ(stopped->finish_reason, "stop");
  // The last new token is never read back: 3 + 30 tokens take 32 positions.
  request.stop_after = nullptr;
  request.max_new_tokens = 30;
  absl::StatusOr<GenerationResult> full = Generate(*decoder, request);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->tokens.size(), 30u);
  request.max_new_tokens = 31;
  EXPECT_THAT(std::string(Generate(*decoder, request).status().message()),
              HasSubstr("a prompt of 3 tokens and --max-new-tokens 31 do not fit the model's 32"));
}

TEST(Generate, ABatchGivesEachRequestItsOwnGeneration) {
  models::LlamaModel model(testing::TinySsaLlamaConfig(true, true), DType::kF64);
  model.InitRandom(4);
  absl::StatusOr<models::LlamaDecoder> alone = models::LlamaDecoder::Create(model, 24);
  absl::StatusOr<models::LlamaDecoder> batched = models::LlamaDecoder::Create(model, 24, 4);
  ASSERT_TRUE(alone.ok() && batched.ok());
  // Prompts of different lengths, greedy and seeded draws, budgets and an eos that ends one early.
  std::vector<GenerationRequest> requests(3);
  requests[0].prompt = {1, 2, 3, 4, 5, 6};
  requests[0].max_new_tokens = 9;
  requests[1].prompt = {7};
  requests[1].max_new_tokens = 4;
  requests[1].sampling = {.temperature = 0.9, .top_k = 5, .top_p = 0.95, .seed = 17};
  requests[2].prompt = {3, 3};
  requests[2].max_new_tokens = 12;
  absl::StatusOr<GenerationResult> free_run = Generate(*alone, requests[2]);
  ASSERT_TRUE(free_run.ok());
  requests[2].stop_ids = {free_run->tokens[5]};
  absl::StatusOr<std::vector<GenerationResult>> together = GenerateBatch(*batched, requests);
  ASSERT_TRUE(together.ok()) << together.status();
  ASSERT_EQ(together->size(), 3u);
  for (size_t r = 0; r < requests.size(); ++r) {
    absl::StatusOr<GenerationResult> single = Generate(*alone, requests[r]);
    ASSERT_TRUE(single.ok());
    EXPECT_EQ((*together)[r].tokens, single->tokens) << r;
    EXPECT_EQ((*together)[r].finish_reason, single->finish_reason) << r;
    for (size_t t = 0; t < single->logprobs.size(); ++t) {
      EXPECT_NEAR((*together)[r].logprobs[t], single->logprobs[t], testing::kF64PathLossAbsTol)
          << r << " " << t;
    }
  }
  EXPECT_LE((*together)[2].tokens.size(), 6u);
  EXPECT_EQ((*together)[2].finish_reason, "eos");
  EXPECT_THAT(std::string(GenerateBatch(*alone, requests).status().message()),
              HasSubstr("3 requests for a decoder of 1 sequences"));
}

}  // namespace
}  // namespace kelvin::inference
