// The trainer on token corpora: a flat token file with a held-out part (data.eval_fraction) trains
// and evaluates the same held-out batches every time, kelvin eval agrees, and a fraction that
// leaves less than a row is a clear error; a blend of two corpora trains and evaluates; fine-tuning
// samples prepared from JSON Lines train on their answers only, and a loss mask of other samples
// is an error naming the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "data/corpus/token_file.h"
#include "data/sft/jsonl_samples.h"
#include "launcher/commands/eval_command.h"
#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "training/job/data_sources.h"
#include "training/job/job_setup.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int32_t kSeparator = 0;

// 300 documents of 10 to 60 tokens counting up from a random start (mod 250, ids 1..250), each
// ended by the separator: a pattern the model can learn.
std::string WriteCountingCorpus(const std::string& name = "counting", unsigned seed = 3) {
  const std::string path = ::testing::TempDir() + "/corpus_training_" + name + ".i32";
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens;
  for (int d = 0; d < 300; ++d) {
    const int length = 10 + static_cast<int>(rng() % 51);
    int32_t token = static_cast<int32_t>(rng() % 250);
    for (int t = 0; t < length; ++t) tokens.push_back(1 + (token++ % 250));
    tokens.push_back(kSeparator);
  }
  EXPECT_TRUE(data::WriteTokenFile(path, tokens, data::TokenType::kInt32).ok());
  return path;
}

// Four quick steps with evaluations after steps 2 and 4.
const std::vector<std::string> kShortRun = {"training.steps=4",
                                            "training.seq_length=64",
                                            "training.micro_batch_size=2",
                                            "training.global_batch_size=4",
                                            "training.eval_interval=2",
                                            "training.eval_steps=2",
                                            "training.export_hf_dir=\"\"",
                                            "lr_schedule.warmup_steps=1",
                                            "logging.log_interval=100"};

absl::StatusOr<config::JobConfig> CorpusJob(const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {"data.token_file.path=\"" + WriteCountingCorpus() + "\"",
                                        "data.token_file.document_separator_token=0",
                                        "data.document_masking=true", "data.eval_fraction=0.05"};
  overrides.insert(overrides.end(), kShortRun.begin(), kShortRun.end());
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
}

// A flat token file of documents ended by a separator, with document masking: it trains, and
// evaluates at the interval on the same held-out batches every time (the same weights score the
// same loss).
TEST(CorpusTraining, HeldOutPartIsEvaluatedTheSameWayEveryTime) {
  const absl::StatusOr<config::JobConfig> job = CorpusJob({});
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ((*trainer)->history().size(), 4u);
  const std::vector<inference::EvalStats>& evaluations = (*trainer)->evaluations();
  ASSERT_EQ(evaluations.size(), 2u);  // after steps 2 and 4
  EXPECT_EQ(evaluations[0].step, 2);
  EXPECT_EQ(evaluations[1].step, 4);
  for (const inference::EvalStats& eval : evaluations) {
    EXPECT_TRUE(std::isfinite(eval.loss) && eval.loss > 0) << eval.loss;
    EXPECT_EQ(eval.retrieval_accuracy, -1.0);  // not a passkey task
  }
  // The held-out batches are fixed: the trained weights score the last evaluation's loss again.
  const absl::StatusOr<inference::EvalStats> again = (*trainer)->Evaluate(4);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->loss, evaluations[1].loss);
  // kelvin eval of the untrained job scores the same batches at the seed's initialisation.
  const absl::StatusOr<inference::EvalStats> initial = inference::EvaluateJob(*job);
  ASSERT_TRUE(initial.ok()) << initial.status();
  EXPECT_TRUE(std::isfinite(initial->loss));
  EXPECT_NE(initial->loss, evaluations[1].loss);
}

// Held-out data without training.eval_interval is scored once, after the last step (it was a
// division by zero, SIGFPE, after the first step).
TEST(CorpusTraining, HeldOutDataWithoutAnIntervalIsEvaluatedAfterTheLastStep) {
  const absl::StatusOr<config::JobConfig> job = CorpusJob({"training.eval_interval=0"});
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ((*trainer)->evaluations().size(), 1u);
  EXPECT_EQ((*trainer)->evaluations()[0].step, 4);
}

// The held-out tokens a job's evaluation scores, with `extra` overrides.
int64_t ScoredTokens(const std::vector<std::string>& extra) {
  const absl::StatusOr<config::JobConfig> job = CorpusJob(extra);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return -1;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return -1;
  const absl::StatusOr<inference::EvalStats> eval = (*trainer)->Evaluate(0);
  EXPECT_TRUE(eval.ok()) << eval.status();
  return eval.ok() ? eval->labelled_tokens : -1;
}

// training.eval_steps counts global batches, as the schema says: the same sequences whatever the
// micro-batch size (it counted micro-batches, scoring part of what was asked without a word).
TEST(CorpusTraining, EvalStepsCountGlobalBatchesWhateverTheMicroBatch) {
  const int64_t two_per_pass = ScoredTokens({"training.micro_batch_size=2"});
  const int64_t one_per_pass = ScoredTokens({"training.micro_batch_size=1"});
  const int64_t four_per_pass = ScoredTokens({"training.micro_batch_size=4"});
  EXPECT_GT(two_per_pass, 2 * 4 * 40);  // 2 global batches of 4 rows of 64 tokens, a few masked
  EXPECT_EQ(one_per_pass, two_per_pass);
  EXPECT_EQ(four_per_pass, two_per_pass);
  EXPECT_LT(ScoredTokens({"training.eval_steps=1"}), two_per_pass);
}

// training.eval_whole_set scores every held-out row once: the same tokens for any micro-batch
// size, a last batch that does not fill up padded without loss, more than eval_steps' batches.
TEST(CorpusTraining, EvalWholeSetScoresEveryHeldOutRowOnce) {
  // With eval_steps set too (the demo job sets it) the two are a conflict.
  const absl::StatusOr<config::JobConfig> both = CorpusJob({"training.eval_whole_set=true"});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()),
              HasSubstr("training.eval_whole_set scores every held-out row: remove "
                        "training.eval_steps"));
  std::string text = testing::FileBytes(testing::DemoJobPath());
  const std::string eval_steps = "eval_steps: 4";
  ASSERT_NE(text.find(eval_steps), std::string::npos);
  text.replace(text.find(eval_steps), eval_steps.size(), "eval_whole_set: true");
  int64_t tokens[3] = {};
  for (int micro = 1; micro <= 3; ++micro) {  // 3: the last batch is padded without loss
    std::vector<std::string> overrides = {"data.token_file.path=\"" + WriteCountingCorpus() + "\"",
                                          "data.token_file.document_separator_token=0",
                                          "data.document_masking=true",
                                          "data.eval_fraction=0.05",
                                          absl::StrCat("training.micro_batch_size=", micro),
                                          absl::StrCat("training.global_batch_size=", 6 * micro),
                                          "training.seq_length=64"};
    const absl::StatusOr<config::JobConfig> job =
        launcher::ParseJobConfig(text, "whole.textproto", overrides);
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    const absl::StatusOr<inference::EvalStats> eval = (*trainer)->Evaluate(0);
    ASSERT_TRUE(eval.ok()) << eval.status();
    tokens[micro - 1] = eval->labelled_tokens;
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(tokens[2], tokens[0]);
  EXPECT_GT(tokens[0], ScoredTokens({"training.eval_steps=1"}));
}

TEST(CorpusTraining, AFractionLeavingLessThanARowIsAClearError) {
  const absl::StatusOr<config::JobConfig> job = CorpusJob({"data.eval_fraction=0.9999"});
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("data.eval_fraction=0.9999 splits the "));
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("leaving a part shorter than one row of training.seq_length + 1 = 65 "
                        "tokens"));
}

TEST(CorpusTraining, ASeparatorOutsideTheVocabularyIsAClearError) {
  // The demo model's 260 tokens: id 100000 never occurs, so no document would end.
  const absl::StatusOr<config::JobConfig> job =
      CorpusJob({"data.token_file.document_separator_token=100000"});
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("data.token_file.document_separator_token=100000 is outside the model's "
                        "vocabulary [0, 260): no token of the corpus can be it"));
}

// The demo job with `data` as its data section, written to a file and loaded with `overrides`.
absl::StatusOr<config::JobConfig> JobWithData(const std::string& data,
                                              const std::vector<std::string>& overrides) {
  std::string text = testing::FileBytes(testing::DemoJobPath());
  const std::string passkey = "data {\n  passkey {}\n}";
  EXPECT_NE(text.find(passkey), std::string::npos);
  text.replace(text.find(passkey), passkey.size(), data);
  const std::string path = ::testing::TempDir() + "/corpus_training_blend.textproto";
  std::ofstream(path) << text;
  return launcher::LoadJobConfig(path, overrides);
}

std::string BlendOf(const std::string& a, const std::string& b, double weight_b) {
  return absl::StrCat(
      "data {\n  blend {\n    corpora { token_file { path: \"", a,
      "\" document_separator_token: 0 } weight: 1 }\n    corpora { token_file { path: \"", b,
      "\" document_separator_token: 0 } weight: ", weight_b,
      " }\n  }\n  document_masking: true\n  eval_fraction: 0.05\n}");
}

// Its resolved config prints and parses back; its errors name the corpus (next test).
TEST(CorpusTraining, ABlendOfTwoCorporaTrainsAndEvaluates) {
  const std::string data =
      BlendOf(WriteCountingCorpus("blend_a", 5), WriteCountingCorpus("blend_b", 6), 3);
  const absl::StatusOr<config::JobConfig> job = JobWithData(data, kShortRun);
  ASSERT_TRUE(job.ok()) << job.status();
  // The resolved config (logged at start, written by kelvin launch) prints the corpora and parses
  // back to the same job.
  const std::string resolved = launcher::FormatResolvedConfig(*job);
  EXPECT_THAT(resolved, HasSubstr("  blend {\n    corpora {\n      token_file {\n"));
  const absl::StatusOr<config::JobConfig> reparsed =
      launcher::ParseJobConfigText(resolved, "resolved");
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ(reparsed->data().blend().corpora(1).weight(), 3);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ((*trainer)->evaluations().size(), 2u);
  for (const StepStats& step : (*trainer)->history()) EXPECT_TRUE(std::isfinite(step.loss));
  EXPECT_TRUE(std::isfinite((*trainer)->evaluations().back().loss));
}

TEST(CorpusTraining, BlendErrorsNameTheCorpus) {
  const std::string a = WriteCountingCorpus("blend_a", 5);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data {\n  blend {\n    corpora { token_file { path: \"" + a + "\" } weight: 1 }\n  }\n}",
       "data.blend has 1 corpora: a blend mixes at least 2"},
      {BlendOf(a, a, 0), "data.blend.corpora[1].weight=0: must be a positive number"},
      {"data {\n  blend {\n    corpora { weight: 1 }\n    corpora { token_file { path: \"" + a +
           "\" } weight: 1 }\n  }\n  document_masking: true\n}",
       "data.blend.corpora[0]: no source: set megatron or token_file"},
      {"data {\n  blend {\n    corpora { token_file { path: \"" + a +
           "\" } weight: 1 }\n    corpora { megatron { path_prefix: \"/d/c.idx\" } weight: 1 }\n"
           "  }\n  document_masking: true\n}",
       "data.document_masking needs data.blend.corpora[0].token_file.document_separator_token"},
  };
  for (const auto& [data, message] : cases) {
    const absl::StatusOr<config::JobConfig> job = JobWithData(data, kShortRun);
    ASSERT_FALSE(job.ok()) << data;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(message)) << data;
  }
  // A corpus that cannot be opened is named by its place in the blend.
  const absl::StatusOr<config::JobConfig> missing =
      JobWithData(BlendOf(a, "/nonexistent/corpus.i32", 1), kShortRun);
  ASSERT_TRUE(missing.ok()) << missing.status();
  const absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*missing);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("data.blend.corpora[1].token_file: token file /nonexistent/corpus.i32"));
}

// The batches the trainer of `job` reads.
absl::StatusOr<DataSources> SourcesOf(const config::JobConfig& job) {
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch, ResolveModelArchitecture(job.model()));
  return BuildDataSources(job, arch);
}

// Copy samples: "1 d_1 .. d_n 2 d_1 .. d_n 3" with digits 10..19, the prompt (up to and with the
// 2) labelled -100. Returns each sample's target count (its answer: n digits and the 3).
std::vector<int64_t> WriteCopySamples(const std::string& path, int samples) {
  std::mt19937 rng(11);
  std::ofstream out(path);
  std::vector<int64_t> targets;
  for (int i = 0; i < samples; ++i) {
    const int n = 3 + static_cast<int>(rng() % 6);
    std::vector<int> digits(n);
    for (int& digit : digits) digit = 10 + static_cast<int>(rng() % 10);
    std::string ids = "1", labels = "-100";
    for (const int digit : digits)
      absl::StrAppend(&ids, ", ", digit), absl::StrAppend(&labels, ", -100");
    absl::StrAppend(&ids, ", 2"), absl::StrAppend(&labels, ", -100");
    for (const int digit : digits) {
      absl::StrAppend(&ids, ", ", digit), absl::StrAppend(&labels, ", ", digit);
    }
    absl::StrAppend(&ids, ", 3"), absl::StrAppend(&labels, ", 3");
    out << "{\"input_ids\": [" << ids << "], \"labels\": [" << labels << "]}\n";
    targets.push_back(n + 1);
  }
  return targets;
}

// Packed whole, they learn their answers (held-out loss and token accuracy).
TEST(CorpusTraining, FineTuningSamplesTrainOnTheirAnswersOnly) {
  const std::string dir = ::testing::TempDir() + "/corpus_training_sft";
  std::filesystem::create_directories(dir);
  const std::vector<int64_t> targets = WriteCopySamples(dir + "/samples.jsonl", 1500);
  const absl::StatusOr<data::PreparedSamples> prepared =
      data::PrepareJsonlSamples(dir + "/samples.jsonl", dir + "/sft");
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const std::string data = absl::StrCat(
      "data {\n  megatron {\n    path_prefix: \"", prepared->tokens_prefix,
      "\"\n    loss_mask_path_prefix: \"", prepared->loss_mask_prefix,
      "\"\n  }\n  packing: DOCUMENTS\n  document_masking: true\n  eval_fraction: 0.05\n}");
  std::vector<std::string> overrides = kShortRun;
  overrides.push_back("training.steps=150");
  overrides.push_back("training.eval_interval=75");
  const absl::StatusOr<config::JobConfig> job = JobWithData(data, overrides);
  ASSERT_TRUE(job.ok()) << job.status();

  // The labelled tokens of each step are the answers of the samples its rows hold.
  absl::StatusOr<DataSources> sources = SourcesOf(*job);
  ASSERT_TRUE(sources.ok()) << sources.status();
  std::vector<int64_t> answers;  // [steps]
  for (int64_t step = 0; step < 150; ++step) {
    int64_t sum = 0;
    for (int64_t m = 0; m < 2; ++m) {
      absl::StatusOr<data::Batch> batch = sources->train->BatchAt({step, m, 2, 0, 1});
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const auto& row : batch->documents) {
        for (const data::DocumentSpan& span : row) {
          if (span.document != data::kPaddingDocument) sum += targets[span.document];
        }
      }
    }
    answers.push_back(sum);
  }

  const absl::StatusOr<inference::EvalStats> untrained = inference::EvaluateJob(*job);
  ASSERT_TRUE(untrained.ok()) << untrained.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ((*trainer)->history().size(), 150u);
  for (const StepStats& step : (*trainer)->history()) {
    EXPECT_EQ(step.labelled_tokens, answers[step.step]) << step.step;
  }
  // It learns to copy: the held-out loss falls from ~ln(260) = 5.6 and most answer tokens come
  // out right (65.8% at step 150 when this was written; the untrained model gets ~none).
  const std::vector<inference::EvalStats>& evaluations = (*trainer)->evaluations();
  ASSERT_EQ(evaluations.size(), 2u);
  EXPECT_GT(untrained->loss, 5.0);
  EXPECT_LT(untrained->token_accuracy, 0.1);
  EXPECT_LT(evaluations.back().loss, 1.5);
  EXPECT_GT(evaluations.back().token_accuracy, 0.5);
}

TEST(CorpusTraining, ALossMaskOfOtherSamplesNamesTheField) {
  const std::string dir = ::testing::TempDir() + "/corpus_training_sft_mismatch";
  std::filesystem::create_directories(dir);
  WriteCopySamples(dir + "/a.jsonl", 30);
  WriteCopySamples(dir + "/b.jsonl", 31);
  ASSERT_TRUE(data::PrepareJsonlSamples(dir + "/a.jsonl", dir + "/a").ok());
  ASSERT_TRUE(data::PrepareJsonlSamples(dir + "/b.jsonl", dir + "/b").ok());
  const absl::StatusOr<config::JobConfig> job = JobWithData(
      absl::StrCat("data {\n  megatron {\n    path_prefix: \"", dir, "/a\"\n",
                   "    loss_mask_path_prefix: \"", dir, "/b_loss_mask\"\n  }\n",
                   "  packing: DOCUMENTS\n  document_masking: true\n  eval_fraction: 0.05\n}"),
      kShortRun);
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("data.megatron.loss_mask_path_prefix: loss mask '" + dir +
                        "/b_loss_mask.bin' has 31 documents"));
}

// A corpus of token 7 throughout: 40 documents of 20 tokens, each ended by the separator.
std::string WriteSevensCorpus() {
  std::vector<int32_t> tokens;
  for (int d = 0; d < 40; ++d) {
    tokens.insert(tokens.end(), 19, 7);
    tokens.push_back(kSeparator);
  }
  const std::string path = ::testing::TempDir() + "/corpus_training_sevens.i32";
  EXPECT_TRUE(data::WriteTokenFile(path, tokens, data::TokenType::kInt32).ok());
  return path;
}

TEST(CorpusTraining, AHeldOutCorpusOfItsOwnIsWhatEvaluationsScore) {
  const std::string held_out_path = WriteSevensCorpus();  // the held-out corpus
  const std::string data = absl::StrCat(
      "data {\n  token_file { path: \"", WriteCountingCorpus(),
      "\" document_separator_token: 0 }\n  document_masking: true\n  packing: DOCUMENTS\n"
      "  eval { token_file { path: \"",
      held_out_path, "\" document_separator_token: 0 } }\n}");
  const absl::StatusOr<config::JobConfig> job = JobWithData(data, kShortRun);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<DataSources> sources = SourcesOf(*job);
  ASSERT_TRUE(sources.ok()) << sources.status();
  ASSERT_NE(sources->eval, nullptr);
  absl::StatusOr<data::Batch> batch = sources->eval->BatchAt({0, 0, 1, 0, 1});
  ASSERT_TRUE(batch.ok()) << batch.status();
  const int64_t t_len = batch->sequence_length();
  int64_t document_tokens = 0;
  for (int64_t b = 0; b < batch->rows(); ++b) {
    for (const data::DocumentSpan& span : batch->documents[b]) {
      if (span.document == data::kPaddingDocument) continue;
      for (int64_t t = span.begin; t < span.end; ++t, ++document_tokens) {
        const int32_t token = batch->tokens.data<int32_t>()[b * t_len + t];
        EXPECT_TRUE(token == 7 || token == kSeparator) << token;
      }
    }
  }
  EXPECT_GT(document_tokens, 0);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ((*trainer)->evaluations().size(), 2u);
  EXPECT_TRUE(std::isfinite((*trainer)->evaluations().back().loss));

  const absl::StatusOr<config::JobConfig> missing = JobWithData(
      absl::StrCat("data {\n  token_file { path: \"", WriteCountingCorpus(),
                   "\" }\n  eval { token_file { path: \"/nonexistent/held_out.i32\" } }\n}"),
      kShortRun);
  ASSERT_TRUE(missing.ok()) << missing.status();
  const absl::StatusOr<std::unique_ptr<Trainer>> failed = Trainer::Create(*missing);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("data.eval.token_file: token file /nonexistent/held_out.i32"));
}

TEST(CorpusTraining, ResumingOnAChangedCorpusWarns) {
  const std::string dir = ::testing::TempDir() + "/corpus_training_changed";
  std::filesystem::remove_all(dir);
  const std::string path = WriteCountingCorpus("changing", 3);
  const auto job = [&] {
    return JobWithData(
        absl::StrCat("data {\n  token_file { path: \"", path,
                     "\" document_separator_token: 0 }\n  document_masking: true\n}"),
        {"training.steps=2", "training.seq_length=64", "training.micro_batch_size=2",
         "training.global_batch_size=4", "training.export_hf_dir=\"\"",
         "lr_schedule.warmup_steps=0", "training.eval_interval=0", "checkpoint.dir=\"" + dir + "\"",
         "checkpoint.interval_steps=1"});
  };
  {
    absl::StatusOr<config::JobConfig> first = job();
    ASSERT_TRUE(first.ok()) << first.status();
    first->mutable_training()->set_steps(1);
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*first);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_TRUE((*trainer)->Run().ok());
  }
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Trainer>> same = Trainer::Create(*job());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->start_step(), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), Not(HasSubstr("data.corpora")));
  WriteCountingCorpus("changing", 4);  // other documents under the same path
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Trainer>> changed = Trainer::Create(*job());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("the checkpoint's run had data.corpora=" + path + ": "));
  std::filesystem::remove_all(dir);
}

TEST(CorpusTraining, FurtherHeldOutSetsAreScoredBesideTheMainOne) {
  // data.eval and data.also_eval "same" are one corpus: their rows are made alike, so every
  // evaluation scores them identically; "sevens", the training corpus (which data.eval may not
  // be, a further set may), scores otherwise.
  const std::string sevens = WriteSevensCorpus();
  const std::string counting = WriteCountingCorpus();
  const auto corpus = [](const std::string& path) {
    return absl::StrCat("{ token_file { path: \"", path, "\" document_separator_token: 0 } }");
  };
  const absl::StatusOr<config::JobConfig> job = JobWithData(
      absl::StrCat("data {\n  token_file { path: \"", sevens,
                   "\" document_separator_token: 0 }\n  document_masking: true\n  eval ",
                   corpus(counting), "\n  also_eval { name: \"same\" corpus ", corpus(counting),
                   " }\n  also_eval { name: \"sevens\" corpus ", corpus(sevens), " }\n}"),
      kShortRun);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  const std::vector<inference::EvalStats>& main = (*trainer)->evaluations();
  const auto& also = (*trainer)->also_evaluations();
  ASSERT_EQ(main.size(), 2u);
  ASSERT_EQ(also.size(), 2u);
  ASSERT_EQ(also.at("same").size(), 2u);
  ASSERT_EQ(also.at("sevens").size(), 2u);
  for (size_t i = 0; i < main.size(); ++i) {
    EXPECT_EQ(also.at("same")[i].step, main[i].step);
    EXPECT_EQ(also.at("same")[i].loss, main[i].loss);
    EXPECT_EQ(also.at("same")[i].correct_tokens, main[i].correct_tokens);
    EXPECT_EQ(also.at("sevens")[i].step, main[i].step);
    EXPECT_NE(also.at("sevens")[i].loss, main[i].loss);
    EXPECT_TRUE(std::isfinite(also.at("sevens")[i].loss));
  }
  // kelvin eval (no checkpoint here: the seed's untrained model) scores every set, "same" exactly
  // as the main one.
  const absl::StatusOr<inference::JobEvaluation> untrained = inference::EvaluateJobOnEverySet(*job);
  ASSERT_TRUE(untrained.ok()) << untrained.status();
  ASSERT_EQ(untrained->also.size(), 2u);
  EXPECT_EQ(untrained->also[0].first, "same");
  EXPECT_EQ(untrained->also[1].first, "sevens");
  EXPECT_EQ(untrained->also[0].second.loss, untrained->main.loss);
  EXPECT_NE(untrained->also[1].second.loss, untrained->main.loss);
}

}  // namespace
}  // namespace kelvin::training
