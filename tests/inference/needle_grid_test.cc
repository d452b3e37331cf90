// The needle grid by generation against teacher forcing, on a tiny model trained briefly on the
// passkey task: retrieval by generation equals teacher-forced retrieval sample by sample; the
// grid's cells count their attempts; a short length or a bad depth is an error; with a tokenizer,
// prompts take the asked number of tokens.
#include "inference/needle_grid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "training/trainer.h"

namespace kelvin::inference {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTrainedLength = 128;

class NeedleGridTest : public ::testing::Test {
 protected:
  // The demo job, briefly: some answers right, some wrong (checked below).
  static void SetUpTestSuite() {
    const absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
        testing::DemoJobPath(),
        {"training.steps=100", "lr_schedule.warmup_steps=10", "training.seq_length=128",
         "training.eval_interval=0", "training.export_hf_dir=\"\"", "logging.log_interval=100"});
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<std::unique_ptr<training::Trainer>> trainer = training::Trainer::Create(*job);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_TRUE((*trainer)->Run().ok());
    trainer_ = std::move(*trainer).release();
  }
  static void TearDownTestSuite() { delete trainer_; }
  static models::LlamaModel& model() { return trainer_->model(); }

  static training::Trainer* trainer_;
};
training::Trainer* NeedleGridTest::trainer_ = nullptr;

// How many of the sample's answer digits, from the first, a full forward's argmax predicts.
int64_t TeacherForcedLeadingDigits(models::LlamaModel& model, const data::PasskeySample& sample) {
  const int64_t inputs = static_cast<int64_t>(sample.tokens.size()) - 1;  // T
  Tensor tokens = Tensor::Empty({1, inputs}, DType::kI32);
  Tensor positions = Tensor::Empty({1, inputs}, DType::kI32);
  for (int64_t t = 0; t < inputs; ++t) {
    tokens.data<int32_t>()[t] = sample.tokens[t];
    positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  }
  const Tensor logits = model.Forward(Context::Cpu(), tokens, positions);  // [T, V]
  const int64_t vocab = logits.dim(1);
  int64_t right = 0;
  for (int64_t t = inputs - data::kPasskeyDigits; t < inputs; ++t, ++right) {
    const float* row = logits.data<float>() + t * vocab;
    const int64_t argmax = std::max_element(row, row + vocab) - row;
    if (argmax != sample.tokens[t + 1]) break;
  }
  return right;
}

// For every prompt the model generates exactly the leading digits that a full forward's argmax
// gets right (greedy decoding equals teacher forcing up to the first wrong digit), at the trained
// length and at twice it.
TEST_F(NeedleGridTest, GenerationRetrievesExactlyWhatTeacherForcingGetsRight) {
  const NeedleText text = ByteNeedleText();
  NeedleGridSpec spec;
  spec.seed = 77;
  absl::StatusOr<models::LlamaDecoder> decoder = models::LlamaDecoder::Create(model(), 512);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  int64_t retrieved = 0, some_digits = 0, attempts = 0;
  for (const int64_t length : {kTrainedLength, 2 * kTrainedLength}) {
    const absl::StatusOr<int64_t> bytes = NeedleSampleBytes(text, length, 0);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, length);  // the layout of a training sample of seq_length `length`
    for (const double depth : {0.0, 0.5, 1.0}) {
      for (int64_t j = 0; j < 8; ++j) {
        const absl::StatusOr<NeedleAttempt> attempt =
            AttemptNeedle(*decoder, text, spec, *bytes, depth, j);
        ASSERT_TRUE(attempt.ok()) << attempt.status();
        const data::PasskeySample sample =
            data::MakePasskeySample(spec.seed, j, *bytes, {depth, depth});
        ASSERT_EQ(static_cast<int64_t>(attempt->prompt.size()), length + 1 - data::kPasskeyDigits);
        EXPECT_TRUE(
            std::equal(attempt->prompt.begin(), attempt->prompt.end(), sample.tokens.begin()));
        ASSERT_EQ(static_cast<int64_t>(attempt->generated.size()), data::kPasskeyDigits);
        int64_t generated_right = 0;
        while (generated_right < data::kPasskeyDigits &&
               attempt->generated[generated_right] ==
                   sample.tokens[length + 1 - data::kPasskeyDigits + generated_right]) {
          ++generated_right;
        }
        const int64_t forced_right = TeacherForcedLeadingDigits(model(), sample);
        EXPECT_EQ(generated_right, forced_right)
            << "length " << length << " depth " << depth << " sample " << j;
        EXPECT_EQ(attempt->retrieved, forced_right == data::kPasskeyDigits);
        retrieved += attempt->retrieved ? 1 : 0;
        some_digits += forced_right > 0 ? 1 : 0;
        ++attempts;
      }
    }
  }
  // The comparison saw digits right and answers wrong (else it would check little; after 100
  // steps about half the prompts start with a right digit and none has all five).
  EXPECT_GT(some_digits, 0);
  EXPECT_LT(retrieved, attempts);
}

TEST_F(NeedleGridTest, CellsCountTheirAttempts) {
  const NeedleText text = ByteNeedleText();
  NeedleGridSpec spec;
  spec.lengths = {kTrainedLength};
  spec.depths = {0.0, 1.0};
  spec.samples = 4;
  spec.seed = 5;
  absl::StatusOr<models::LlamaDecoder> decoder =
      models::LlamaDecoder::Create(model(), kTrainedLength);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::vector<NeedleCell> reported;
  const absl::StatusOr<std::vector<NeedleCell>> cells =
      RunNeedleGrid(*decoder, text, spec, [&](const NeedleCell& c) { reported.push_back(c); });
  ASSERT_TRUE(cells.ok()) << cells.status();
  ASSERT_EQ(cells->size(), 2u);
  EXPECT_EQ(reported.size(), 2u);
  for (size_t c = 0; c < 2; ++c) {
    const NeedleCell& cell = (*cells)[c];
    EXPECT_EQ(cell.length, kTrainedLength);
    EXPECT_EQ(cell.depth, spec.depths[c]);
    EXPECT_EQ(cell.samples, 4);
    int64_t retrieved = 0;
    for (int64_t j = 0; j < 4; ++j) {
      const absl::StatusOr<NeedleAttempt> attempt =
          AttemptNeedle(*decoder, text, spec, kTrainedLength, cell.depth, j);
      ASSERT_TRUE(attempt.ok());
      retrieved += attempt->retrieved ? 1 : 0;
    }
    EXPECT_EQ(cell.retrieved, retrieved);
    EXPECT_EQ(cell.mean_prompt_tokens, kTrainedLength + 1 - data::kPasskeyDigits);
    EXPECT_NEAR(cell.mean_depth, cell.depth, 0.2);  // the nearest sentence boundaries
  }
}

TEST_F(NeedleGridTest, ShortLengthsAndBadDepthsAreErrors) {
  const NeedleText text = ByteNeedleText();
  EXPECT_THAT(NeedleSampleBytes(text, 50, 0).status().message(),
              HasSubstr("needle length 50 is too short"));
  EXPECT_TRUE(NeedleSampleBytes(text, data::MinPasskeySequenceLength(2), 2).ok());
  EXPECT_FALSE(NeedleSampleBytes(text, data::MinPasskeySequenceLength(2) - 1, 2).ok());
  absl::StatusOr<models::LlamaDecoder> decoder =
      models::LlamaDecoder::Create(model(), kTrainedLength);
  ASSERT_TRUE(decoder.ok());
  NeedleGridSpec spec;
  spec.lengths = {kTrainedLength};
  spec.depths = {1.5};
  EXPECT_THAT(RunNeedleGrid(*decoder, text, spec).status().message(),
              HasSubstr("needle depth 1.5 is not in [0, 1]"));
}

TEST(NeedleText, TokenizerPromptsTakeTheAskedLength) {
  const absl::StatusOr<data::Tokenizer> tokenizer =
      data::Tokenizer::FromDirectory(std::string(KELVIN_FIXTURES_DIR) + "/tokenizer/llama3_style");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const absl::StatusOr<NeedleText> text = TokenizerNeedleText(*tokenizer);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_GT(text->bytes_per_token, 1.5);  // BPE merges the filler's words
  for (const int64_t length : {512, 2048}) {
    const absl::StatusOr<int64_t> bytes = NeedleSampleBytes(*text, length, 1);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    for (int64_t j = 0; j < 5; ++j) {
      const absl::StatusOr<std::vector<int32_t>> prompt = text->encode(
          data::ByteTokensToText(data::MakePasskeySample(3, j, *bytes, {}, 1).tokens).substr(3));
      ASSERT_TRUE(prompt.ok());
      // The prompt with its answer digits here (at most 6 tokens of the 8 kept for the answer)
      // about fills the length.
      EXPECT_LE(static_cast<int64_t>(prompt->size()), length + 1) << length;
      EXPECT_GE(static_cast<int64_t>(prompt->size()), length * 9 / 10) << length;
    }
  }
}

// Each task's prompt and its answer room take the asked positions: exactly with bytes, within a
// few tokens with a tokenizer; every cell of a task's grid counts its attempts and scores.
TEST_F(NeedleGridTest, EveryTaskSizesItsPromptsAndScoresItsCells) {
  const absl::StatusOr<data::Tokenizer> tokenizer =
      data::Tokenizer::FromDirectory(std::string(KELVIN_FIXTURES_DIR) + "/tokenizer/llama3_style");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const absl::StatusOr<NeedleText> tokens = TokenizerNeedleText(*tokenizer);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const NeedleText bytes = ByteNeedleText();
  absl::StatusOr<models::LlamaDecoder> decoder = models::LlamaDecoder::Create(model(), 512);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  for (const data::RetrievalTask task :
       {data::RetrievalTask::kMultiKey, data::RetrievalTask::kMultiValue,
        data::RetrievalTask::kVariableTracking}) {
    SCOPED_TRACE(data::RetrievalTaskName(task));
    const int64_t answer = NeedleAnswerTokens(bytes, task);
    EXPECT_EQ(answer, data::RetrievalAnswerBytes(task));
    for (const int64_t length : {1024, 4096}) {
      const absl::StatusOr<int64_t> filler = NeedleSampleBytes(*tokens, length, 0, task);
      ASSERT_TRUE(filler.ok()) << filler.status();
      for (int64_t j = 0; j < 3; ++j) {
        const absl::StatusOr<std::vector<int32_t>> prompt =
            tokens->encode(data::MakeRetrievalSample(task, 3, j, *filler, 0.5).prompt);
        ASSERT_TRUE(prompt.ok());
        const int64_t positions =
            static_cast<int64_t>(prompt->size()) + NeedleAnswerTokens(*tokens, task) - 1;
        EXPECT_LE(positions, length) << length;
        EXPECT_GE(positions, length * 9 / 10) << length;
      }
    }
    NeedleGridSpec spec;
    spec.task = task;
    spec.lengths = {512};
    spec.depths = {0.0, 1.0};
    spec.samples = 1;
    const absl::StatusOr<std::vector<NeedleCell>> cells = RunNeedleGrid(*decoder, bytes, spec);
    ASSERT_TRUE(cells.ok()) << cells.status();
    ASSERT_EQ(cells->size(), 2u);
    for (const NeedleCell& cell : *cells) {
      // With bytes, prompt and answer take exactly the length's positions, less the filler's
      // partial sentence.
      EXPECT_LE(cell.mean_prompt_tokens + answer - 1, cell.length);
      EXPECT_GE(cell.mean_prompt_tokens + answer - 1, cell.length - 40);
      int64_t retrieved = 0;
      double score = 0;
      for (int64_t j = 0; j < 1; ++j) {
        const absl::StatusOr<int64_t> filler = NeedleSampleBytes(bytes, cell.length, 0, task);
        ASSERT_TRUE(filler.ok());
        const absl::StatusOr<NeedleAttempt> attempt =
            AttemptNeedle(*decoder, bytes, spec, *filler, cell.depth, j);
        ASSERT_TRUE(attempt.ok());
        EXPECT_EQ(attempt->retrieved, attempt->score == 1.0);
        retrieved += attempt->retrieved ? 1 : 0;
        score += attempt->score;
      }
      EXPECT_EQ(cell.retrieved, retrieved);
      EXPECT_DOUBLE_EQ(cell.mean_score, score);
      EXPECT_NEAR(cell.mean_depth, cell.depth, 0.1);
    }
  }
  EXPECT_THAT(
      NeedleSampleBytes(bytes, 100, 0, data::RetrievalTask::kVariableTracking).status().message(),
      HasSubstr("needle length 100 is too short for the vartrack task"));
}

}  // namespace
}  // namespace kelvin::inference
