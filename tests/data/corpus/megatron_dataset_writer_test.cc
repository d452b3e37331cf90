// MegatronDatasetWriter: the committed fixtures' sequences and documents, written again, give
// Megatron-Core's own .bin and .idx byte for byte (also when written wider and narrowed at the
// end); what it writes reads back; tokens that do not fit the type are errors naming them; an
// unfinished write leaves no dataset behind.
#include "data/corpus/megatron_dataset_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "nlohmann/json.hpp"
#include "tests/testing/files.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

const std::string kFixtureDir = std::string(KELVIN_FIXTURES_DIR) + "/megatron/";

std::string Prefix(const std::string& name) {
  return ::testing::TempDir() + "/megatron_writer_" + name;
}

// The files whose names start with `prefix` (the dataset's, its temporaries).
std::vector<std::string> Entries(const std::string& prefix) {
  const std::filesystem::path path(prefix);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(path.filename().string())) names.push_back(name);
  }
  return names;
}

TEST(MegatronDatasetWriter, RewritesMegatronCoresFixturesByteForByte) {
  std::ifstream in(kFixtureDir + "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  struct Case {
    const char* name;
    TokenType written, stored;  // stored != written: FinishAs rewrites the .bin
  };
  for (const auto& [name, type, stored] :
       {Case{"corpus_u16", TokenType::kUInt16, TokenType::kUInt16},
        Case{"corpus_i32", TokenType::kInt32, TokenType::kInt32},
        Case{"corpus_u16", TokenType::kInt32, TokenType::kUInt16}}) {
    SCOPED_TRACE(absl::StrCat(name, " written as ", std::string(TokenTypeName(type))));
    const nlohmann::json& want = expected[name];
    const auto lengths = want["sequence_lengths"].get<std::vector<int64_t>>();
    const auto document_indices = want["document_indices"].get<std::vector<int64_t>>();
    // The documents' tokens, back to back: the sequences in order.
    std::vector<int64_t> stream;
    for (const auto& document : want["documents"]) {
      for (const int64_t token : document.get<std::vector<int64_t>>()) stream.push_back(token);
    }
    absl::StatusOr<MegatronDatasetWriter> writer =
        MegatronDatasetWriter::Create(Prefix(name), type);
    ASSERT_TRUE(writer.ok()) << writer.status();
    size_t next_document = 1, offset = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
      ASSERT_TRUE(
          writer->AddSequence({stream.data() + offset, static_cast<size_t>(lengths[s])}).ok());
      offset += static_cast<size_t>(lengths[s]);
      if (next_document < document_indices.size() &&
          document_indices[next_document] == static_cast<int64_t>(s) + 1) {
        writer->EndDocument();
        ++next_document;
      }
    }
    ASSERT_TRUE(writer->FinishAs(stored).ok() && writer->Commit().ok());
    for (const char* extension : {".bin", ".idx"}) {
      EXPECT_EQ(testing::FileBytes(Prefix(name) + extension),
                testing::FileBytes(kFixtureDir + name + extension))
          << extension;
      EXPECT_FALSE(std::filesystem::exists(Prefix(name) + extension + ".partial"));
    }
    EXPECT_FALSE(std::filesystem::exists(Prefix(name) + ".bin.rewritten.partial"));
  }
}

TEST(MegatronDatasetWriter, WhatItWritesReadsBack) {
  absl::StatusOr<MegatronDatasetWriter> writer =
      MegatronDatasetWriter::Create(Prefix("roundtrip"), TokenType::kUInt8);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->AddSequence(std::vector<int64_t>{1, 0, 255}).ok());
  writer->EndDocument();
  ASSERT_TRUE(writer->AddSequence(std::vector<int64_t>{7}).ok());
  ASSERT_TRUE(writer->AddSequence(std::vector<int64_t>{8, 9}).ok());  // ended by Finish
  ASSERT_TRUE(writer->Finish().ok() && writer->Commit().ok());
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(Prefix("roundtrip"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->token_type(), TokenType::kUInt8);
  ASSERT_EQ(corpus->num_documents(), 2);
  EXPECT_EQ(corpus->document_start(1), 3);
  std::vector<int64_t> tokens(6);
  corpus->Read(0, tokens);
  EXPECT_EQ(tokens, (std::vector<int64_t>{1, 0, 255, 7, 8, 9}));
}

TEST(MegatronDatasetWriter, TokensThatDoNotFitAreErrors) {
  absl::StatusOr<MegatronDatasetWriter> writer =
      MegatronDatasetWriter::Create(Prefix("overflow"), TokenType::kUInt16);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const absl::Status status = writer->AddSequence(std::vector<int64_t>{3, 65536});
  EXPECT_THAT(status.message(),
              HasSubstr("token 65536 (position 1 of sequence 0) does not fit uint16"));
  EXPECT_FALSE(writer->AddSequence(std::vector<int64_t>{-1}).ok());
  EXPECT_EQ(writer->num_tokens(), 0);
}

TEST(MegatronDatasetWriter, FinishingAsATypeTheTokensDoNotFitIsAnError) {
  {
    absl::StatusOr<MegatronDatasetWriter> writer =
        MegatronDatasetWriter::Create(Prefix("narrowed"), TokenType::kInt32);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->AddSequence(std::vector<int64_t>{3, 70000, 5}).ok());
    EXPECT_THAT(writer->FinishAs(TokenType::kUInt16).message(),
                HasSubstr("tokens 3 to 70000 do not fit uint16"));
  }
  EXPECT_THAT(Entries(Prefix("narrowed")), ::testing::IsEmpty());
}

TEST(MegatronDatasetWriter, AnUnfinishedWriteLeavesNoDataset) {
  {
    absl::StatusOr<MegatronDatasetWriter> writer =
        MegatronDatasetWriter::Create(Prefix("unfinished"), TokenType::kInt32);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->AddSequence(std::vector<int64_t>{1, 2, 3}).ok());
    EXPECT_THAT(Entries(Prefix("unfinished")), ::testing::SizeIs(1));  // its temporary
  }
  EXPECT_THAT(Entries(Prefix("unfinished")), ::testing::IsEmpty());
  const absl::StatusOr<MegatronDatasetWriter> nowhere =
      MegatronDatasetWriter::Create("/nonexistent_dir/x", TokenType::kInt32);
  EXPECT_THAT(nowhere.status().message(),
              HasSubstr("Megatron data file: cannot write /nonexistent_dir/x.bin: creating "
                        "/nonexistent_dir/x.bin.tmp."));
  EXPECT_THAT(nowhere.status().message(), HasSubstr("create its directory first"));
}

}  // namespace
}  // namespace kelvin::data
