// kelvin generate on a model directory with a byte-level tokenizer (a random tiny SSA model with
// the Llama-3-style test tokenizer's 4104 ids): text prompts are encoded with the template's BOS,
// the output decodes the generated ids, greedy decoding repeats itself, and --stop ends the
// generation at the first token whose text ends with the stop string; prompts of different
// lengths decoded in batches give each prompt its own line, in order, as one at a time does.
#include "inference/text_generation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"
#include "inference/corpus_score.h"
#include "launcher/commands/inference_options.h"
#include "launcher/config/job_config.h"
#include "models/llama/llama_model.h"
#include "tests/models/tiny_ssa_llama.h"

namespace kelvin::inference {
namespace {

namespace fs = std::filesystem;

constexpr char kTokenizerFixture[] = KELVIN_FIXTURES_DIR "/tokenizer/llama3_style";  // 4104 ids

// A tiny random SSA model of `vocab_size` ids exported as `name`, with the test tokenizer beside
// it or without a tokenizer.
std::string Model(const std::string& name, int64_t vocab_size, bool with_tokenizer) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  models::LlamaConfig config = testing::TinySsaLlamaConfig(true, true);
  config.vocab_size = vocab_size;
  config.max_position_embeddings = 64;
  models::LlamaModel model(config, DType::kF32);
  model.InitRandom(9);
  models::HfExportProvenance provenance;
  if (with_tokenizer) provenance.source_dir = kTokenizerFixture;
  EXPECT_TRUE(model.ExportHf(dir.string(), provenance).ok());
  return dir.string();
}

// The model the tokenizer was made for.
std::string ModelWithTokenizer() { return Model("kelvin_generate_model", 4104, true); }

std::vector<nlohmann::json> Generated(const GenerateOptions& options) {
  static const std::string model = ModelWithTokenizer();
  absl::StatusOr<std::vector<std::string>> lines =
      GenerateFromJob(launcher::JobOfModelDirectory(model), options);
  EXPECT_TRUE(lines.ok()) << lines.status();
  std::vector<nlohmann::json> parsed;
  for (const std::string& line : lines.value_or(std::vector<std::string>{})) {
    parsed.push_back(nlohmann::json::parse(line));
  }
  return parsed;
}

TEST(GenerateCommand, TextPromptsDecodeAndStopEndsAtTheStopText) {
  GenerateOptions options;
  options.prompts = {"Hello world"};
  options.max_new_tokens = 12;
  const std::vector<nlohmann::json> free_run = Generated(options);
  ASSERT_EQ(free_run.size(), 1u);
  EXPECT_EQ(free_run[0]["prompt_tokens"][0], 4096);  // <|begin_of_text|>
  const std::vector<int32_t> tokens = free_run[0]["tokens"];
  ASSERT_EQ(tokens.size(), 12u);
  EXPECT_EQ(free_run[0]["finish_reason"], "length");
  EXPECT_FALSE(free_run[0]["text"].get<std::string>().empty());
  EXPECT_EQ(Generated(options)[0]["tokens"], free_run[0]["tokens"]);  // greedy repeats itself

  // The text of the first three tokens, as the stop string: generation ends after token 3 (or
  // earlier, where the text already ended with it).
  GenerateOptions first_three = options;
  first_three.max_new_tokens = 3;
  const std::string prefix = Generated(first_three)[0]["text"];
  ASSERT_FALSE(prefix.empty());
  GenerateOptions stopping = options;
  stopping.stop = prefix.substr(prefix.size() > 3 ? prefix.size() - 3 : 0);
  const nlohmann::json stopped = Generated(stopping)[0];
  EXPECT_EQ(stopped["finish_reason"], "stop");
  const std::vector<int32_t> kept = stopped["tokens"];
  ASSERT_LE(kept.size(), 3u);
  EXPECT_EQ(kept, std::vector<int32_t>(tokens.begin(), tokens.begin() + kept.size()));
  EXPECT_TRUE(stopped["text"].get<std::string>().ends_with(stopping.stop));
}

TEST(GenerateCommand, BatchesGiveEachPromptItsOwnLineInOrder) {
  GenerateOptions options;
  options.prompts = {"Hello world", "A", "The quick brown fox jumps", "ok"};
  options.token_prompts = {{4096, 17}};
  options.max_new_tokens = 6;
  options.sampling = {.temperature = 0.8, .top_k = 0, .top_p = 1.0, .seed = 3};
  options.batch_size = 1;
  const std::vector<nlohmann::json> one_at_a_time = Generated(options);
  options.batch_size = 3;  // two batches, the second one short
  const std::vector<nlohmann::json> batched = Generated(options);
  ASSERT_EQ(one_at_a_time.size(), 5u);
  ASSERT_EQ(batched.size(), 5u);
  for (size_t p = 0; p < 5; ++p) {
    EXPECT_EQ(batched[p]["prompt_tokens"], one_at_a_time[p]["prompt_tokens"]) << p;
    EXPECT_EQ(batched[p]["tokens"], one_at_a_time[p]["tokens"]) << p;
    EXPECT_EQ(batched[p]["finish_reason"], one_at_a_time[p]["finish_reason"]) << p;
  }
  EXPECT_EQ(batched[0]["prompt_tokens"], (std::vector<int32_t>{4096, 17}));  // ids come first
}

TEST(GenerateCommand, ATextPromptThatIsNotUtf8IsNamedBySource) {
  static const std::string model = ModelWithTokenizer();
  GenerateOptions options;
  options.prompts = {"fine", "bad \xc3", "also bad \xff"};
  options.prompt_sources = {"--prompt 1", "prompts.txt line 4", "prompts.txt line 9"};
  absl::StatusOr<std::vector<std::string>> lines =
      GenerateFromJob(launcher::JobOfModelDirectory(model), options);
  EXPECT_THAT(std::string(lines.status().message()),
              ::testing::StartsWith("prompts.txt line 4: the text is not valid UTF-8 at byte"));
  options.prompt_sources.clear();  // a caller that names none: its place
  lines = GenerateFromJob(launcher::JobOfModelDirectory(model), options);
  EXPECT_THAT(std::string(lines.status().message()),
              ::testing::StartsWith("text prompt 2: the text is not valid UTF-8 at byte"));
}

// A job file holding only the model's fields serves generate and eval --text: no data source,
// learning rate, steps, batch or sequence length to invent.
TEST(GenerateCommand, AJobOfOnlyTheModelGeneratesAndScoresText) {
  static const std::string model = ModelWithTokenizer();
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_model_only_job";
  fs::create_directories(dir);
  const std::string job_path = (dir / "model_only.textproto").string();
  ASSERT_TRUE(io::WriteFileAtomically(job_path, {"model { hf_dir: \"" + model + "\" }\n"}).ok());
  const std::string text_path = (dir / "text.txt").string();
  ASSERT_TRUE(io::WriteFileAtomically(text_path, {"Hello world, hello again."}).ok());

  const absl::StatusOr<config::JobConfig> job = launcher::LoadForwardOnlyJob(
      "generate", launcher::JobArguments{.path = job_path, .overrides = {}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "model_only");
  GenerateOptions options;
  options.prompts = {"Hello world"};
  options.max_new_tokens = 4;
  const absl::StatusOr<std::vector<std::string>> lines = GenerateFromJob(*job, options);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 1u);
  // The same tokens as from the model directory itself.
  EXPECT_EQ(nlohmann::json::parse(lines->front())["tokens"], Generated(options)[0]["tokens"]);

  ScoreOptions score;
  score.text = text_path;
  const absl::StatusOr<ScoreReport> report = ScoreData(*job, score);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->result.targets, 0);
  EXPECT_EQ(report->seq_length, 64);  // no training.seq_length: the model's positions

  // The training-only fields stay required where they are needed: training.
  EXPECT_THAT(std::string(launcher::LoadJobConfig(job_path).status().message()),
              ::testing::HasSubstr("data: no data source"));
}

// A model without a tokenizer of its own (a preset's export) is given one with --tokenizer: text
// in and out, as from the directory that holds both. A directory without tokenizer.json, and a
// tokenizer with more ids than the model has embeddings, are errors naming the option and numbers.
TEST(GenerateCommand, TokenizerOptionGivesAModelItsTokenizer) {
  GenerateOptions options;
  options.prompts = {"Hello world"};
  options.max_new_tokens = 4;
  const std::string bare = Model("kelvin_generate_bare_model", 4104, false);
  absl::StatusOr<std::vector<std::string>> lines =
      GenerateFromJob(launcher::JobOfModelDirectory(bare), options);
  EXPECT_THAT(std::string(lines.status().message()),
              ::testing::HasSubstr("the model's tokenizer is needed for text prompts and --stop: "
                                   "model.hf_dir=" +
                                   bare + " has no tokenizer.json; give --tokenizer DIR"));
  options.tokenizer = kTokenizerFixture;
  lines = GenerateFromJob(launcher::JobOfModelDirectory(bare), options);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const nlohmann::json line = nlohmann::json::parse(lines->front());
  EXPECT_EQ(line["prompt_tokens"][0], 4096);  // the tokenizer's template: <|begin_of_text|>
  EXPECT_EQ(line["tokens"], Generated(options)[0]["tokens"]);  // same weights, same tokenizer
  EXPECT_TRUE(line.contains("text"));

  options.tokenizer = bare;  // no tokenizer.json there
  EXPECT_THAT(
      std::string(GenerateFromJob(launcher::JobOfModelDirectory(bare), options).status().message()),
      ::testing::StartsWith("--tokenizer " + bare +
                            " has no tokenizer.json: give the "
                            "directory that holds the model's tokenizer.json"));
  options.tokenizer = kTokenizerFixture;
  const std::string small = Model("kelvin_generate_small_model", 4000, false);
  EXPECT_THAT(
      std::string(
          GenerateFromJob(launcher::JobOfModelDirectory(small), options).status().message()),
      ::testing::HasSubstr("the tokenizer's ids go up to 4103 (4104 ids), beyond the "
                           "model's vocab_size=4000"));
  // eval --text takes it too.
  const fs::path text = fs::path(::testing::TempDir()) / "kelvin_tokenizer_option.txt";
  ASSERT_TRUE(io::WriteFileAtomically(text.string(), {"Hello world, hello again."}).ok());
  ScoreOptions score;
  score.text = text.string();
  EXPECT_THAT(std::string(ScoreData(launcher::JobOfModelDirectory(bare), score).status().message()),
              ::testing::HasSubstr("the model's tokenizer is needed for --text " + text.string()));
  score.tokenizer = kTokenizerFixture;
  EXPECT_TRUE(ScoreData(launcher::JobOfModelDirectory(bare), score).ok());
}

// A model whose vocabulary is padded far beyond its tokenizer's 4104 ids (8192 embeddings, the
// padding random): sampling for text leaves out the ids without text, so every prompt gets its
// text. Before, the first such id drawn failed the whole run. With --allow-unspellable such ids are
// drawn, and a prompt whose tokens have no text says so in its own line, the others complete.
TEST(GenerateCommand, APaddedVocabularyNeverFailsARun) {
  const std::string padded = Model("kelvin_generate_padded_model", 8192, true);
  GenerateOptions options;
  options.prompts = {"Hello world", "A", "The quick brown fox", "ok"};
  options.max_new_tokens = 16;
  options.sampling = {.temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 7};
  int64_t failed = 0;
  absl::StatusOr<std::vector<std::string>> lines = GenerateFromJob(
      launcher::JobOfModelDirectory(padded), options, {}, nullptr, nullptr, &failed);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 4u);
  EXPECT_EQ(failed, 0);
  for (const std::string& text : *lines) {
    const nlohmann::json line = nlohmann::json::parse(text);
    EXPECT_TRUE(line.contains("text")) << text;
    for (const int32_t token : line["tokens"]) EXPECT_LT(token, 4104) << text;
  }

  options.allow_unspellable = true;
  lines = GenerateFromJob(launcher::JobOfModelDirectory(padded), options, {}, nullptr, nullptr,
                          &failed);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 4u);
  int64_t unspellable = 0, without_text = 0;
  for (const std::string& text : *lines) {
    const nlohmann::json line = nlohmann::json::parse(text);
    for (const int32_t token : line["tokens"]) unspellable += token >= 4104 ? 1 : 0;
    EXPECT_NE(line.contains("text"), line.contains("error")) << text;
    without_text += line.contains("error") ? 1 : 0;
  }
  EXPECT_GT(unspellable, 0);  // the padding is drawn: the case above is the one it guards
  EXPECT_EQ(failed, without_text);
}

// A prompt file with CRLF line ends (written on Windows) gives the prompts without the CR; the
// options no generation can honour are errors naming the option: a --stop that is not UTF-8 (at
// its byte offset) and a --max-new-tokens beyond any model's positions.
TEST(GenerateCommand, PromptFilesAndOptionsAreCheckedBeforeGenerating) {
  const fs::path file = fs::path(::testing::TempDir()) / "kelvin_crlf_prompts.txt";
  ASSERT_TRUE(io::WriteFileAtomically(file.string(), {"Hello world\r\n\r\nok\r\nlast"}).ok());
  GenerateOptions options;
  ASSERT_TRUE(AddPromptFile(file.string(), options).ok());
  EXPECT_EQ(options.prompts, (std::vector<std::string>{"Hello world", "ok", "last"}));
  EXPECT_EQ(options.prompt_sources.back(), file.string() + " line 4");

  static const std::string model = ModelWithTokenizer();
  options.max_new_tokens = 2;
  options.stop = "ok\xff!";
  EXPECT_EQ(GenerateFromJob(launcher::JobOfModelDirectory(model), options).status().message(),
            "--stop: the text is not valid UTF-8 at byte 2 (of 4); give the stop text in UTF-8, "
            "as the generated text is");
  options.stop.clear();
  options.max_new_tokens = INT64_MAX;  // the cache size would overflow
  EXPECT_THAT(
      std::string(
          GenerateFromJob(launcher::JobOfModelDirectory(model), options).status().message()),
      ::testing::StartsWith("--max-new-tokens 9223372036854775807: must be in [1, "
                            "134217728]"));
}

}  // namespace
}  // namespace kelvin::inference
