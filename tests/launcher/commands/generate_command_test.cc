// kelvin generate on a model directory with a byte-level tokenizer (a random tiny SSA model with
// the Llama-3-style test tokenizer's 4104 ids): text prompts are encoded with the template's BOS,
// the output decodes the generated ids, greedy decoding repeats itself, and --stop ends the
// generation at the first token whose text ends with the stop string; prompts of different
// lengths decoded in batches give each prompt its own line, in order, as one at a time does.
#include "launcher/commands/generate_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "launcher/commands/score_command.h"
#include "models/llama/llama_model.h"
#include "tests/models/tiny_ssa_llama.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;

// A tiny SSA model exported with the test tokenizer beside it.
std::string ModelWithTokenizer() {
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_generate_model";
  fs::remove_all(dir);
  models::LlamaConfig config = testing::TinySsaLlamaConfig(true, true);
  config.vocab_size = 4104;
  config.max_position_embeddings = 64;
  models::LlamaModel model(config, DType::kF32);
  model.InitRandom(9);
  models::HfExportProvenance provenance;
  provenance.source_dir = std::string(KELVIN_FIXTURES_DIR) + "/tokenizer/llama3_style";
  EXPECT_TRUE(model.ExportHf(dir.string(), provenance).ok());
  return dir.string();
}

std::vector<nlohmann::json> Generated(const GenerateOptions& options) {
  static const std::string model = ModelWithTokenizer();
  absl::StatusOr<std::vector<std::string>> lines =
      GenerateFromJob(JobOfModelDirectory(model), options);
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
      GenerateFromJob(JobOfModelDirectory(model), options);
  EXPECT_THAT(std::string(lines.status().message()),
              ::testing::StartsWith("prompts.txt line 4: the text is not valid UTF-8 at byte"));
  options.prompt_sources.clear();  // a caller that names none: its place
  lines = GenerateFromJob(JobOfModelDirectory(model), options);
  EXPECT_THAT(std::string(lines.status().message()),
              ::testing::StartsWith("text prompt 2: the text is not valid UTF-8 at byte"));
}

}  // namespace
}  // namespace kelvin::launcher
