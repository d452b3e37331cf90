// Fuzzing prepare-data's line parser: 2000 deterministic mutations of valid sample lines (a byte
// replaced by a JSON-significant one, a byte deleted, a digit changed, the line cut short), of
// input_ids lines and of text, prompt/completion and chat lines (--tokenizer). Each either prepares
// a dataset that reads back one document per sample, or fails with an error naming the file and
// line 2 (the mutated one) and leaves nothing behind; none crashes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "data/corpus/mmap_indexed_dataset.h"
#include "data/sft/jsonl_samples.h"
#include "tests/core/io/test_files.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

std::string Mutate(std::string line, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  static const std::string kSignificant = "{}[],:\"-.0123456789eE \\tnull";
  const size_t at = pick(0, line.size() - 1);
  switch (pick(0, 3)) {
    case 0:
      line[at] = kSignificant[pick(0, kSignificant.size() - 1)];
      break;
    case 1:
      line.erase(at, 1);
      break;
    case 2:
      for (size_t i = at; i < line.size(); ++i) {
        if (line[i] >= '0' && line[i] <= '9') {
          line[i] = static_cast<char>('0' + pick(0, 9));
          break;
        }
      }
      break;
    default:
      line.resize(at);
      break;
  }
  return line;
}

// 2000 mutations of `lines` (used in turn) each prepared after a valid first line: it prepares a
// dataset that reads back one document per sample, or fails naming line 2 and leaves nothing.
void FuzzLines(const std::vector<std::string>& lines, const std::string& first,
               const TextSampleEncoder* encoder) {
  std::mt19937_64 rng(20261130);
  int prepared = 0, refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string line = Mutate(lines[static_cast<size_t>(trial) % lines.size()], rng);
    SCOPED_TRACE(line);
    testing::ScratchDir dir;
    testing::WriteFile(dir.Path("s.jsonl"), first + "\n" + line + "\n");
    const absl::StatusOr<PreparedSamples> result =
        PrepareJsonlSamples(dir.Path("s.jsonl"), dir.Path("out/sft"), encoder);
    if (result.ok()) {  // e.g. a changed digit, or a line cut to nothing (a blank line is skipped)
      ++prepared;
      absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(dir.Path("out/sft"));
      ASSERT_TRUE(corpus.ok()) << corpus.status();
      EXPECT_EQ(corpus->num_documents(), result->samples);
      EXPECT_EQ(corpus->num_tokens(), result->tokens);
    } else {
      ++refused;
      EXPECT_THAT(std::string(result.status().message()), HasSubstr(dir.Path("s.jsonl") + ":2: "));
      EXPECT_FALSE(std::filesystem::exists(dir.Path("out")));
    }
  }
  // Both outcomes are exercised.
  EXPECT_GT(prepared, 200);
  EXPECT_GT(refused, 200);
}

TEST(JsonlSamplesFuzz, MutatedLinesPrepareOrFailNamingTheLine) {
  const std::vector<std::string> lines = {
      R"({"input_ids": [12, 7, 300, 65501], "labels": [-100, -100, 300, 65501], "text": "a \"q\""})",
      R"({"loss_mask": [0, 1, 1], "input_ids": [5, 6, 7], "meta": {"x": [1, [2]], "y": null}})",
      R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]})",
  };
  FuzzLines(lines, "{\"input_ids\": [1]}", nullptr);
}

// The same for text, prompt/completion and chat lines under the Llama-3-style tokenizer (mutated
// strings may become invalid UTF-8, roles unknown, contents empty or no string).
TEST(JsonlSamplesFuzz, MutatedTextLinesPrepareOrFailNamingTheLine) {
  absl::StatusOr<TextSampleEncoder> encoder = TextSampleEncoder::FromDirectory(
      std::string(KELVIN_FIXTURES_DIR) + "/tokenizer/llama3_style");
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const std::vector<std::string> lines = {
      R"({"text": "Größe 42: \"quoted\"\nnext <|eot_id|> line", "id": 7})",
      R"({"prompt": "Q: 12 + 30?", "completion": " 42", "meta": [1, {"x": null}]})",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": )"
      R"("Hi 😀"}, {"role": "assistant", "content": "Hello."}]})",
  };
  FuzzLines(lines, R"({"text": "fine"})", &*encoder);
}

}  // namespace
}  // namespace kelvin::data
