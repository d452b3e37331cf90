// What `kelvin eval` prints and writes: full-precision losses with perplexity and token counts,
// and the JSON result with every set of every evaluated checkpoint.
#include "launcher/commands/eval_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace kelvin::launcher {
namespace {

inference::EvalStats Stats(int64_t step, double loss, double retrieval) {
  inference::EvalStats stats;
  stats.step = step;
  stats.loss = loss;
  stats.retrieval_accuracy = retrieval;
  stats.labelled_tokens = 10000;
  stats.correct_tokens = 6123;
  stats.token_accuracy = 0.6123;
  return stats;
}

TEST(EvalCommand, TheLineHasFullPrecisionPerplexityAndTokenCounts) {
  EXPECT_EQ(FormatEvaluation(Stats(3, 2.25410961437, -1)),
            "loss 2.254109614 | perplexity 9.52681 | token accuracy 61.23% (6123 of 10000 tokens)");
  EXPECT_THAT(FormatEvaluation(Stats(3, 1.0, 0.25)),
              ::testing::HasSubstr("| passkey retrieval 25.00%"));
}

TEST(EvalCommand, TheJsonHoldsEverySetOfEveryCheckpoint) {
  config::JobConfig job;
  job.set_name("sft");
  inference::JobEvaluation first{Stats(2, 2.5, -1), {{"web", Stats(2, 3.25, -1)}}};
  inference::JobEvaluation second{Stats(4, 2.125, -1), {}};
  const nlohmann::json root = nlohmann::json::parse(EvaluationsJson(job, {first, second}));
  EXPECT_EQ(root["job"], "sft");
  ASSERT_EQ(root["evaluations"].size(), 2u);
  EXPECT_EQ(root["evaluations"][0]["step"], 2);
  ASSERT_EQ(root["evaluations"][0]["sets"].size(), 2u);
  EXPECT_EQ(root["evaluations"][0]["sets"][1]["name"], "web");
  EXPECT_EQ(root["evaluations"][0]["sets"][1]["loss"].get<double>(), 3.25);
  EXPECT_DOUBLE_EQ(root["evaluations"][1]["sets"][0]["perplexity"].get<double>(), std::exp(2.125));
  EXPECT_EQ(root["evaluations"][1]["sets"][0]["labelled_tokens"], 10000);
  EXPECT_FALSE(root["evaluations"][1]["sets"][0].contains("passkey_retrieval"));
}

}  // namespace
}  // namespace kelvin::launcher
