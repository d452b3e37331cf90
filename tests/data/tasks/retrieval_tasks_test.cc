// The multi-key, multi-value and variable-tracking samples: deterministic in (seed, index), the
// asked needle at the stated depth, the answers findable in the prompt as the question asks them
// (the variable chain followed by hand), a fixed size besides the filler; and the scoring of an
// answer by whole words, against hand-computed fractions.
#include "data/tasks/retrieval_tasks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

namespace kelvin::data {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

constexpr RetrievalTask kTasks[] = {RetrievalTask::kMultiKey, RetrievalTask::kMultiValue,
                                    RetrievalTask::kVariableTracking};

TEST(RetrievalTasks, NamesParseBackAndUnknownNamesAreErrors) {
  for (const RetrievalTask task : {RetrievalTask::kPasskey, RetrievalTask::kMultiKey,
                                   RetrievalTask::kMultiValue, RetrievalTask::kVariableTracking}) {
    const absl::StatusOr<RetrievalTask> parsed = ParseRetrievalTask(RetrievalTaskName(task));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, task);
  }
  const absl::StatusOr<RetrievalTask> bad = ParseRetrievalTask("multi-key");
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown retrieval task \"multi-key\""));
}

TEST(RetrievalTasks, SamplesAreDeterministicAndDiffer) {
  for (const RetrievalTask task : kTasks) {
    SCOPED_TRACE(RetrievalTaskName(task));
    const RetrievalSample a = MakeRetrievalSample(task, 7, 3, 2000, 0.5);
    const RetrievalSample b = MakeRetrievalSample(task, 7, 3, 2000, 0.5);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.answers, b.answers);
    EXPECT_NE(MakeRetrievalSample(task, 7, 4, 2000, 0.5).prompt, a.prompt);
    EXPECT_NE(MakeRetrievalSample(task, 8, 3, 2000, 0.5).prompt, a.prompt);
  }
}

// Besides the filler, every sample of a task has the same bytes; the filler stays within budget.
TEST(RetrievalTasks, SizeIsTheFixedPartPlusTheFiller) {
  for (const RetrievalTask task : kTasks) {
    SCOPED_TRACE(RetrievalTaskName(task));
    const size_t fixed = MakeRetrievalSample(task, 0, 0, 0, 0).prompt.size();
    for (int64_t index = 0; index < 20; ++index) {
      EXPECT_EQ(MakeRetrievalSample(task, 1, index, 0, 0.3).prompt.size(), fixed);
      const size_t size = MakeRetrievalSample(task, 1, index, 5000, 0.3).prompt.size();
      EXPECT_LE(size, fixed + 5000);
      EXPECT_GT(size, fixed + 5000 - 40);  // whole sentences of at most 40 bytes
    }
  }
}

TEST(RetrievalTasks, MultiKeyAsksOneOfFourNamesAndItsNumberIsInThePrompt) {
  const std::regex needle("The special number for ([a-z]+-[a-z]+) is ([0-9]{5})\\. ");
  for (int64_t index = 0; index < 30; ++index) {
    const RetrievalSample s = MakeRetrievalSample(RetrievalTask::kMultiKey, 2, index, 3000, 0.7);
    std::map<std::string, std::string> numbers;
    for (std::sregex_iterator m(s.prompt.begin(), s.prompt.end(), needle), end; m != end; ++m) {
      numbers[(*m)[1]] = (*m)[2];
    }
    ASSERT_EQ(numbers.size(), 4u) << s.prompt;
    std::smatch asked;
    ASSERT_TRUE(std::regex_search(s.prompt, asked,
                                  std::regex("What is the special number for ([a-z]+-[a-z]+)\\? "
                                             "The special number for ([a-z]+-[a-z]+) is $")));
    EXPECT_EQ(asked[1], asked[2]);
    ASSERT_EQ(s.answers.size(), 1u);
    EXPECT_EQ(numbers.at(asked[1]), s.answers[0]);
    // The asked needle sits at the asked depth (the nearest sentence boundary).
    EXPECT_NEAR(s.depth, 0.7, 0.05);
    const size_t at = s.prompt.find("for " + std::string(asked[1]) + " is " + s.answers[0]);
    const size_t question = s.prompt.find("What is");
    EXPECT_NEAR(static_cast<double>(at) / question, 0.7, 0.08);
  }
}

TEST(RetrievalTasks, MultiValueAsksEveryNumberOfOneName) {
  for (int64_t index = 0; index < 30; ++index) {
    const RetrievalSample s = MakeRetrievalSample(RetrievalTask::kMultiValue, 3, index, 3000, 0.0);
    ASSERT_EQ(s.answers.size(), 4u);
    std::smatch asked;
    ASSERT_TRUE(std::regex_search(
        s.prompt, asked, std::regex("What are all the special numbers for ([a-z]+-[a-z]+)\\?")));
    for (const std::string& number : s.answers) {
      EXPECT_THAT(s.prompt, HasSubstr("The special number for " + std::string(asked[1]) + " is " +
                                      number + ". "));
    }
    EXPECT_EQ(s.depth, 0.0);
    EXPECT_EQ(
        s.prompt.find("The special number for " + std::string(asked[1]) + " is " + s.answers[0]),
        0u);  // depth 0: the first needle opens the prompt
    EXPECT_THAT(s.prompt, EndsWith(" are "));
  }
}

// The chain from the asked value, followed by hand: every name whose assignment leads back to it.
TEST(RetrievalTasks, VariableTrackingAnswersAreTheChainOfTheAskedValue) {
  const std::regex assignment("VAR ([A-Z]{5}) = (VAR ([A-Z]{5})|([0-9]{5}))\\. ");
  for (int64_t index = 0; index < 30; ++index) {
    const RetrievalSample s =
        MakeRetrievalSample(RetrievalTask::kVariableTracking, 4, index, 4000, 0.25);
    std::smatch asked;
    ASSERT_TRUE(std::regex_search(s.prompt, asked,
                                  std::regex("Which variables hold the value ([0-9]{5})\\?")));
    std::map<std::string, std::string> value_of;  // in prompt order, every source comes first
    int assignments = 0;
    for (std::sregex_iterator m(s.prompt.begin(), s.prompt.end(), assignment), end; m != end;
         ++m, ++assignments) {
      const std::string source = (*m)[3].matched ? value_of.at((*m)[3]) : std::string((*m)[4]);
      value_of[(*m)[1]] = source;
    }
    EXPECT_EQ(assignments, 6);  // the chain of 4 and the decoy's 2
    std::vector<std::string> holding;
    for (const auto& [name, value] : value_of) {
      if (value == asked[1]) holding.push_back(name);
    }
    std::vector<std::string> answers = s.answers;
    std::sort(answers.begin(), answers.end());
    EXPECT_EQ(answers, holding) << s.prompt;
    EXPECT_NEAR(s.depth, 0.25, 0.05);
  }
}

TEST(RetrievalTasks, AnswersAreScoredByWholeWords) {
  const std::vector<std::string> numbers = {"12345", "67890", "11111", "22222"};
  EXPECT_EQ(ScoreRetrievalAnswer("12345, 67890, 11111 and 22222.", numbers), 1.0);
  EXPECT_EQ(ScoreRetrievalAnswer(" 67890, 22222.", numbers), 0.5);
  EXPECT_EQ(ScoreRetrievalAnswer("123456 678901 x11111", numbers), 0.0);  // inside longer runs
  EXPECT_EQ(ScoreRetrievalAnswer("123456, 12345", numbers), 0.25);  // a later whole occurrence
  EXPECT_EQ(ScoreRetrievalAnswer("", numbers), 0.0);
  EXPECT_EQ(ScoreRetrievalAnswer("QWERT, ASDFG", {"QWERT", "ASDFG", "ZXCVB"}), 2.0 / 3.0);
  EXPECT_EQ(ScoreRetrievalAnswer("QWERTY", {"QWERT"}), 0.0);
}

TEST(RetrievalTasks, AnswerBytesHoldAFullAnswer) {
  EXPECT_EQ(RetrievalAnswerBytes(RetrievalTask::kMultiKey), 6);                    // "12345."
  EXPECT_EQ(RetrievalAnswerBytes(RetrievalTask::kMultiValue), 4 * 5 + 3 * 2 + 1);  // "a, b, c, d."
  EXPECT_EQ(RetrievalAnswerBytes(RetrievalTask::kVariableTracking), 27);
}

}  // namespace
}  // namespace kelvin::data
