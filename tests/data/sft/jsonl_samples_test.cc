// JSON Lines samples into a Megatron dataset and its loss mask: labels (-100 = no loss),
// loss_mask and unmasked lines all read back as written, the token type follows the largest id,
// ignored keys are counted, and every malformed line is an error naming the file, line and field
// after which nothing is left behind.
#include "data/sft/jsonl_samples.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "tests/core/io/test_files.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Tokens(const TokenCorpus& corpus) {
  std::vector<int64_t> tokens(corpus.num_tokens());
  corpus.Read(0, tokens);
  return tokens;
}

TEST(JsonlSamples, LabelsMasksAndPlainLinesReadBack) {
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("samples.jsonl"),
                     R"({"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4], "text": "a"})"
                     "\n\n"
                     R"({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]})"
                     "\n"
                     R"({"input_ids": [8, 9], "attention_mask": [1, 1], "text": "b"})"
                     "\n"
                     // Keys in any order; keys inside another key's value are not the sample's.
                     R"({"labels": [-100, 11], "meta": {"input_ids": [99], "x": [[1], {}]},)"
                     R"( "input_ids": [10, 11]})"
                     "\n");
  absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("samples.jsonl"), dir.Path("sft"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->samples, 4);
  EXPECT_EQ(prepared->tokens, 11);
  EXPECT_EQ(prepared->targets, 2 + 2 + 2 + 1);
  EXPECT_EQ(prepared->max_token, 11);
  EXPECT_EQ(prepared->token_type, TokenType::kUInt16);
  EXPECT_EQ(prepared->loss_mask_prefix, dir.Path("sft_loss_mask"));
  EXPECT_EQ(prepared->ignored_keys,
            (std::map<std::string, int64_t>{{"attention_mask", 1}, {"meta", 1}, {"text", 2}}));

  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(dir.Path("sft"));
  absl::StatusOr<TokenCorpus> mask = OpenMegatronDataset(dir.Path("sft_loss_mask"));
  ASSERT_TRUE(corpus.ok() && mask.ok());
  EXPECT_EQ(Tokens(*corpus), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(corpus->token_type(), TokenType::kUInt16);
  EXPECT_EQ(corpus->num_documents(), 4);
  EXPECT_EQ(corpus->document_start(1), 4);
  EXPECT_EQ(corpus->document_start(2), 7);
  EXPECT_EQ(corpus->document_start(3), 9);
  EXPECT_EQ(mask->token_type(), TokenType::kUInt8);
  EXPECT_EQ(Tokens(*mask), (std::vector<int64_t>{0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1}));
  ASSERT_TRUE(corpus->AttachLossMask(std::move(*mask)).ok());

  const std::string described = DescribePreparedSamples(*prepared);
  EXPECT_THAT(described,
              HasSubstr("4 samples (one document each), 11 tokens (uint16, the largest id 11)"));
  EXPECT_THAT(described, HasSubstr("7 of the tokens (63.6%) are training targets"));
  EXPECT_THAT(described, HasSubstr("loss_mask_path_prefix: \"" + dir.Path("sft_loss_mask") + "\""));
  EXPECT_THAT(described, HasSubstr("packing: DOCUMENTS"));
  // Lengths 4, 3, 2, 2.
  EXPECT_THAT(described, HasSubstr("sample lengths: median 2, p90 4, p99 4, longest 4 tokens; "
                                   "longer than 2: 2 samples (50.0%; 27.3% of the tokens cut "
                                   "off), 4: none"));
}

// Files longer than a batch of lines (parsed in parallel, written in file order): the samples
// keep their order across batches and thread counts, and of two bad lines in one batch the first
// is the error.
TEST(JsonlSamples, ManyLinesKeepTheirOrderAndTheFirstBadLineIsTheError) {
  testing::ScratchDir dir;
  constexpr int kLines = 5000;
  std::string text;
  std::vector<int64_t> expected;
  for (int i = 0; i < kLines; ++i) {
    if (i % 7 == 3) text += "\n";  // blank lines count in the line numbers
    const int64_t a = i, b = 2 * i + 1;
    text += "{\"input_ids\": [" + std::to_string(a) + ", " + std::to_string(b) + "]";
    text += i % 2 == 0 ? ", \"loss_mask\": [0, 1]}\n" : "}\n";
    expected.insert(expected.end(), {a, b});
  }
  testing::WriteFile(dir.Path("many.jsonl"), text);
  const int default_threads = omp_get_max_threads();
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    const std::string prefix = dir.Path("many_" + std::to_string(threads));
    absl::StatusOr<PreparedSamples> prepared = PrepareJsonlSamples(dir.Path("many.jsonl"), prefix);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    EXPECT_EQ(prepared->samples, kLines);
    EXPECT_EQ(prepared->targets, kLines / 2 + 2 * (kLines / 2));
    absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(prefix);
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    EXPECT_EQ(Tokens(*corpus), expected) << threads << " threads";
    EXPECT_EQ(corpus->num_documents(), kLines);
  }
  omp_set_num_threads(default_threads);
  // Lines 3001 and 3500 of the file (past the first batch) are bad.
  std::vector<std::string> lines(kLines, "{\"input_ids\": [1]}");
  lines[3000] = "{\"input_ids\": [1, oops]}";
  lines[3499] = "{\"input_ids\": []}";
  testing::WriteFile(dir.Path("bad.jsonl"), absl::StrJoin(lines, "\n") + "\n");
  const absl::StatusOr<PreparedSamples> bad =
      PrepareJsonlSamples(dir.Path("bad.jsonl"), dir.Path("bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(dir.Path("bad.jsonl") + ":3001:"));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("bad.bin")));
}

TEST(JsonlSamples, LargeIdsGetInt32AndNoMaskWithoutLabels) {
  testing::ScratchDir dir;
  // An earlier run under the same prefix had masks: its mask must not pair with the new tokens.
  testing::WriteFile(dir.Path("masked.jsonl"), "{\"input_ids\": [1, 2], \"loss_mask\": [0, 1]}\n");
  ASSERT_TRUE(PrepareJsonlSamples(dir.Path("masked.jsonl"), dir.Path("plain")).ok());
  ASSERT_TRUE(std::filesystem::exists(dir.Path("plain_loss_mask.bin")));
  testing::WriteFile(dir.Path("plain.jsonl"),
                     "{\"input_ids\": [70000, 3]}\n{\"input_ids\": [65499]}\n");
  absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("plain.jsonl"), dir.Path("plain"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->token_type, TokenType::kInt32);
  EXPECT_TRUE(prepared->loss_mask_prefix.empty());
  EXPECT_TRUE(prepared->removed_stale_mask);
  EXPECT_FALSE(std::filesystem::exists(dir.Path("plain_loss_mask.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("plain_loss_mask.idx")));
  EXPECT_THAT(DescribePreparedSamples(*prepared), HasSubstr("an earlier run's mask"));
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(dir.Path("plain"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(Tokens(*corpus), (std::vector<int64_t>{70000, 3, 65499}));
  EXPECT_THAT(DescribePreparedSamples(*prepared), HasSubstr("every token is a target"));
}

// A line with 100,000 distinct ignored keys parses in linear time (each key was looked up in a
// list of the ones before it) and counts each key once.
TEST(JsonlSamples, ManyDistinctIgnoredKeysParseInLinearTime) {
  testing::ScratchDir dir;
  std::string line = "{\"input_ids\": [1, 2, 3]";
  for (int k = 0; k < 100000; ++k) line += ", \"k" + std::to_string(k) + "\": 0";
  testing::WriteFile(dir.Path("wide.jsonl"), line + "}\n");
  const absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("wide.jsonl"), dir.Path("wide"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->ignored_keys.size(), 100000u);
  EXPECT_EQ(prepared->ignored_keys.at("k99999"), 1);
}

// The summary's ignored keys are escaped (a NUL or a newline would cut or break the line), long
// ones shortened, at most 20 listed; the data section's prefix is an escaped textproto string.
TEST(JsonlSamples, TheSummaryEscapesKeysAndPrefixes) {
  testing::ScratchDir dir;
  std::string line =
      R"({"input_ids": [1, 2], "a\u0000b": 1, "c\nd": 2, ")" + std::string(1000, 'A') + R"(": 3)";
  for (int k = 0; k < 30; ++k) line += ", \"k" + std::to_string(k) + "\": 0";
  testing::WriteFile(dir.Path("keys.jsonl"), line + "}\n");
  const std::string prefix = dir.Path("odd\"name\nhere");
  const absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("keys.jsonl"), prefix);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->ignored_keys.size(), 33u);
  const std::string described = DescribePreparedSamples(*prepared);
  EXPECT_THAT(described, HasSubstr("\"" + std::string(64, 'A') + "\"... (1000 bytes) (1 lines), "));
  EXPECT_THAT(described, HasSubstr(R"("a\000b" (1 lines), "c\nd" (1 lines), "k0" (1 lines))"));
  EXPECT_THAT(described, HasSubstr("and 13 more\n"));
  EXPECT_EQ(described.find(std::string(65, 'A')), std::string::npos);
  EXPECT_THAT(described, HasSubstr("path_prefix: \"" + dir.path() + "/odd\\\"name\\nhere\"\n"));
  EXPECT_THAT(described, HasSubstr("packing: DOCUMENTS"));  // nothing cut off
}

// An --out whose files would be the samples file itself is refused; the file stays as it was.
TEST(JsonlSamples, AnOutputOverTheSamplesFileIsRefused) {
  testing::ScratchDir dir;
  const std::string samples = R"({"input_ids": [1, 2]})"
                              "\n";
  testing::WriteFile(dir.Path("p.idx"), samples);
  const absl::StatusOr<PreparedSamples> prepared =
      PrepareJsonlSamples(dir.Path("p.idx"), dir.Path("p"));
  ASSERT_FALSE(prepared.ok());
  EXPECT_THAT(std::string(prepared.status().message()),
              HasSubstr("would write " + dir.Path("p.idx") + ", which is the samples file"));
  std::ifstream in(dir.Path("p.idx"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), samples);
}

TEST(JsonlSamples, BadLinesAreErrorsAndNothingIsWritten) {
  struct Case {
    std::string line, message;
  };
  const std::vector<Case> cases = {
      {R"({"input_ids": [1, 2)",
       ":2: not valid JSON (each line must be one JSON object): column 20: syntax error while "
       "parsing array - unexpected end of input; expected ']'"},
      {R"({"input_ids": [1, 2]} x)",
       ":2: not valid JSON (each line must be one JSON object): "
       "column 23: syntax error while parsing value - invalid literal"},
      // nlohmann alone stops at a NUL byte: the rest of the line would be dropped unread.
      {std::string("{\"input_ids\": [1, 2]}\0{\"input_ids\": [3]}", 40),
       ":2: column 22 is a NUL byte: a JSON Lines file is UTF-8 text"},
      {R"([1, 2])", ":2: the line is an array, not an object with \"input_ids\""},
      {R"("text")", ":2: the line is a string, not an object with \"input_ids\""},
      {R"({"labels": [1]})", ":2: no \"input_ids\""},
      // Text lines without a tokenizer say what they need.
      {R"({"text": "a"})",
       ":2: a \"text\" sample is text, which needs the model's tokenizer: give prepare-data "
       "--tokenizer DIR"},
      {R"({"messages": [{"role": "user", "content": "a"}]})", ":2: a \"messages\" sample"},
      {R"({"input_ids": []})", ":2: \"input_ids\" is empty"},
      {R"({"input_ids": "1 2"})", ":2: \"input_ids\" is a string, not an array of integers"},
      {R"({"input_ids": {"a": 1}})", ":2: \"input_ids\" is an object, not an array of integers"},
      {R"({"input_ids": [1, [2]]})", ":2: \"input_ids\"[1] is an array: token ids are integers"},
      {R"({"input_ids": [1, "2"]})", ":2: \"input_ids\"[1] is \"2\": token ids are integers"},
      {R"({"input_ids": [1, 9223372036854775808]})",
       ":2: \"input_ids\"[1] is 9223372036854775808: token ids"},
      {R"({"input_ids": [1, 2], "input_ids": [3]})", ":2: \"input_ids\" appears twice"},
      {R"({"input_ids": [1, 2], "labels": [-100, null]})",
       ":2: \"labels\"[1] is null: labels are integers (-100, or the token id itself)"},
      {R"({"input_ids": [1, -4]})",
       ":2: \"input_ids\"[1] is -4: token ids are integers in [0, 2^31)"},
      {R"({"input_ids": [1, 2.5]})", ":2: \"input_ids\"[1] is 2.5"},
      {R"({"input_ids": [1, 2], "labels": [-100]})",
       ":2: \"labels\" has 1 entries but \"input_ids\" has 2"},
      {R"({"input_ids": [1, 2], "labels": [-100, 3]})",
       ":2: \"labels\"[1] is 3 but \"input_ids\"[1] is 2: labels must be the input_ids themselves"},
      {R"({"input_ids": [1, 2], "loss_mask": [0, 2]})",
       ":2: \"loss_mask\"[1] is 2: a loss mask holds 1 (training target) or 0 (no loss)"},
      {R"({"input_ids": [1, 2], "loss_mask": [1]})", ":2: \"loss_mask\" has 1 entries"},
      {R"({"input_ids": [1], "labels": [1], "loss_mask": [1]})",
       ":2: both \"labels\" and \"loss_mask\": give one of them"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    testing::ScratchDir dir;
    testing::WriteFile(dir.Path("bad.jsonl"), "{\"input_ids\": [1, 2, 3]}\n" + c.line + "\n");
    const absl::StatusOr<PreparedSamples> prepared =
        PrepareJsonlSamples(dir.Path("bad.jsonl"), dir.Path("out"));
    EXPECT_THAT(prepared.status().message(), HasSubstr(dir.Path("bad.jsonl") + c.message));
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      files.push_back(entry.path().filename().string());
    }
    EXPECT_EQ(files, std::vector<std::string>{"bad.jsonl"});
  }
  testing::ScratchDir dir;
  // A directory made for the output is removed again when the input is bad.
  testing::WriteFile(dir.Path("bad.jsonl"), "{\"input_ids\": [1]}\n{}\n");
  EXPECT_THAT(
      PrepareJsonlSamples(dir.Path("bad.jsonl"), dir.Path("new/nested/out")).status().message(),
      HasSubstr("bad.jsonl:2: no \"input_ids\""));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("new")));
  EXPECT_THAT(PrepareJsonlSamples(dir.Path("missing.jsonl"), dir.Path("out")).status().message(),
              HasSubstr("samples file " + dir.Path("missing.jsonl") + ": no such file"));
  testing::WriteFile(dir.Path("blank.jsonl"), "\n  \n");
  EXPECT_THAT(PrepareJsonlSamples(dir.Path("blank.jsonl"), dir.Path("out")).status().message(),
              HasSubstr("has no sample (no non-blank line)"));
  // Samples that mark nothing to learn: refused, and no dataset is left for a training to load.
  testing::WriteFile(dir.Path("untaught.jsonl"),
                     "{\"input_ids\": [1, 2], \"labels\": [-100, -100]}\n"
                     "{\"input_ids\": [3], \"labels\": [-100]}\n");
  EXPECT_THAT(
      PrepareJsonlSamples(dir.Path("untaught.jsonl"), dir.Path("untaught")).status().message(),
      HasSubstr("untaught.jsonl': none of its 2 samples has a training target (every label is "
                "-100)"));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("untaught.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("untaught_loss_mask.bin")));
}

// An output prefix that names no file is refused by the command line and the preparation alike.
TEST(JsonlSamples, AnOutputPrefixMustNameAFile) {
  for (const std::string prefix : {"", "o/", "data/.", "data/.."}) {
    EXPECT_THAT(OutputPrefixProblem(prefix), HasSubstr("names no file")) << prefix;
  }
  EXPECT_EQ(OutputPrefixProblem("data/sft/train"), "");
  const absl::StatusOr<PreparedSamples> prepared = PrepareJsonlSamples("unused.jsonl", "out/");
  EXPECT_THAT(std::string(prepared.status().message()), HasSubstr("--out \"out/\" names no file"));
}

}  // namespace
}  // namespace kelvin::data
