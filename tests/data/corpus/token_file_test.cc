// Flat token files: int32 and uint16 round trips, the type from the extension, documents ended by
// a separator token (and document masking over them), and the errors for a bad name, a truncated
// file, a missing file and a token that does not fit uint16.
#include "data/corpus/token_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/cross_entropy.h"
#include "data/sampling/sampler.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> AllTokens(const TokenCorpus& corpus) {
  std::vector<int64_t> tokens(corpus.num_tokens());
  corpus.Read(0, tokens);
  return tokens;
}

TEST(TokenFile, Int32RoundTrip) {
  const std::string path = ::testing::TempDir() + "tokens_round_trip.i32";
  const std::vector<int32_t> tokens = {0, 1, 128000, 2147483647, 7, 42};
  ASSERT_TRUE(WriteTokenFile(path, tokens, TokenType::kInt32).ok());
  absl::StatusOr<TokenCorpus> corpus = OpenTokenFile(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->token_type(), TokenType::kInt32);
  EXPECT_EQ(corpus->num_documents(), 1);
  EXPECT_EQ(AllTokens(*corpus), std::vector<int64_t>(tokens.begin(), tokens.end()));
}

TEST(TokenFile, UInt16RoundTripAndPartialReads) {
  const std::string path = ::testing::TempDir() + "tokens_round_trip.u16";
  const std::vector<int32_t> tokens = {65535, 0, 300, 12, 40000};
  ASSERT_TRUE(WriteTokenFile(path, tokens, TokenType::kUInt16).ok());
  std::ifstream raw(path, std::ios::binary | std::ios::ate);
  EXPECT_EQ(raw.tellg(), 10);  // 2 bytes per token, nothing else
  absl::StatusOr<TokenCorpus> corpus = OpenTokenFile(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->token_type(), TokenType::kUInt16);
  EXPECT_EQ(AllTokens(*corpus), std::vector<int64_t>(tokens.begin(), tokens.end()));
  std::vector<int64_t> middle(2);
  corpus->Read(2, middle);
  EXPECT_EQ(middle, (std::vector<int64_t>{300, 12}));
}

TEST(TokenFile, ExplicitTypeOverridesTheName) {
  const std::string path = ::testing::TempDir() + "tokens_explicit.dat";
  ASSERT_TRUE(WriteTokenFile(path, {{1, 2, 3, 4}}, TokenType::kUInt16).ok());
  absl::StatusOr<TokenCorpus> as_u16 = OpenTokenFile(path, TokenType::kUInt16);
  ASSERT_TRUE(as_u16.ok()) << as_u16.status();
  EXPECT_EQ(AllTokens(*as_u16), (std::vector<int64_t>{1, 2, 3, 4}));
  absl::StatusOr<TokenCorpus> as_i32 = OpenTokenFile(path, TokenType::kInt32);
  ASSERT_TRUE(as_i32.ok()) << as_i32.status();
  EXPECT_EQ(AllTokens(*as_i32), (std::vector<int64_t>{1 + (2 << 16), 3 + (4 << 16)}));
}

TEST(TokenFile, TypeFromExtension) {
  EXPECT_EQ(*FlatTokenTypeFromPath("a/b.int32"), TokenType::kInt32);
  EXPECT_EQ(*FlatTokenTypeFromPath("a/b.uint16"), TokenType::kUInt16);
  const absl::Status status = FlatTokenTypeFromPath("corpus.tokens").status();
  EXPECT_THAT(status.message(),
              HasSubstr("token file 'corpus.tokens': cannot tell the token type"));
  EXPECT_THAT(status.message(), HasSubstr("end it in .i32"));
}

TEST(TokenFile, SizeNotAWholeNumberOfTokens) {
  const std::string path = ::testing::TempDir() + "tokens_truncated.i32";
  std::ofstream(path, std::ios::binary) << "abcdef";
  const absl::Status status = OpenTokenFile(path).status();
  EXPECT_THAT(status.message(), HasSubstr("is 6 bytes, not a whole number of 4-byte int32 tokens"));
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST(TokenFile, MissingFile) {
  const absl::Status status = OpenTokenFile("/nonexistent/dir/tokens.u16").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("token file /nonexistent/dir/tokens.u16: no such file"));
}

TEST(TokenFile, DirectoryIsNotATokenFile) {
  const absl::Status status = OpenTokenFile(::testing::TempDir(), TokenType::kInt32).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("token file " + ::testing::TempDir()));
  EXPECT_THAT(status.message(), HasSubstr("is a directory"));
}

TEST(TokenFile, WriteRejectsTokensThatDoNotFit) {
  const std::string path = ::testing::TempDir() + "tokens_too_big.u16";
  const absl::Status status = WriteTokenFile(path, {{5, 70000}}, TokenType::kUInt16);
  EXPECT_THAT(status.message(), HasSubstr("token 70000 at position 1 does not fit uint16"));
  EXPECT_THAT(WriteTokenFile(path, {{5}}, TokenType::kInt64).message(),
              HasSubstr("flat token files are int32 or uint16, not int64"));
}

TEST(TokenFile, SeparatorEndsEachDocument) {
  // Documents [5 1 2 0] [3 4 0] [0] [6 7]: the separator 0 is its document's last token.
  const std::vector<int32_t> tokens = {5, 1, 2, 0, 3, 4, 0, 0, 6, 7};
  for (const TokenType type : {TokenType::kInt32, TokenType::kUInt16}) {
    const std::string path = ::testing::TempDir() + "tokens_separated.dat";
    ASSERT_TRUE(WriteTokenFile(path, tokens, type).ok());
    absl::StatusOr<TokenCorpus> corpus = OpenTokenFile(path, type, 0);
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    ASSERT_EQ(corpus->num_documents(), 4) << TokenTypeName(type);
    const std::vector<int64_t> starts = {0, 4, 7, 8, 10};
    for (int64_t d = 0; d <= 4; ++d) EXPECT_EQ(corpus->document_start(d), starts[d]) << d;
    EXPECT_EQ(AllTokens(*corpus), std::vector<int64_t>(tokens.begin(), tokens.end()));

    // With document masking the sampler restarts positions at each document and ignores the
    // label that crosses into the next one.
    absl::StatusOr<std::unique_ptr<CorpusSampler>> sampler = CorpusSampler::Create(
        std::make_shared<const TokenCorpus>(std::move(*corpus)), {.sequence_length = 9,
                                                                  .micro_batch_size = 1,
                                                                  .vocab_size = 8,
                                                                  .seed = 1,
                                                                  .document_masking = true});
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    absl::StatusOr<Batch> row = (*sampler)->ReadRows(std::vector<int64_t>{0});
    ASSERT_TRUE(row.ok()) << row.status();
    const std::vector<int32_t> positions(row->positions.data<int32_t>(),
                                         row->positions.data<int32_t>() + 9);
    EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 0, 0}));
    const std::vector<int32_t> labels(row->labels.data<int32_t>(), row->labels.data<int32_t>() + 9);
    const int32_t x = ops::kIgnoreIndex;
    EXPECT_EQ(labels, (std::vector<int32_t>{1, 2, 0, x, 4, 0, x, x, 7}));
  }
  // A separator at the very end closes the last document: no empty one after it.
  const std::string path = ::testing::TempDir() + "tokens_separator_last.i32";
  ASSERT_TRUE(WriteTokenFile(path, {{1, 0, 2, 0}}, TokenType::kInt32).ok());
  absl::StatusOr<TokenCorpus> corpus = OpenTokenFile(path, TokenType::kInt32, 0);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->num_documents(), 2);
}

TEST(TokenFile, VocabCheckNamesFilePositionValueAndVocab) {
  const std::string path = ::testing::TempDir() + "tokens_vocab.i32";
  ASSERT_TRUE(WriteTokenFile(path, {{3, 9, 257, 2}}, TokenType::kInt32).ok());
  absl::StatusOr<TokenCorpus> corpus = OpenTokenFile(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_TRUE(corpus->CheckVocab(258).ok());
  const absl::Status status = corpus->CheckVocab(257);
  EXPECT_THAT(status.message(), HasSubstr("token file '" + path +
                                          "': document 0, position 2 holds token id 257, "
                                          "outside the vocabulary [0, 257)"));
}

}  // namespace
}  // namespace kelvin::data
