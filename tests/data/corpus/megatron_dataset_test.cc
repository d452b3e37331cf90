// Megatron-LM indexed datasets: the committed fixtures (written by Megatron-Core's own
// IndexedDatasetBuilder, tools/make_megatron_fixture.py) read back as recorded; every corruption
// of the .idx/.bin pair is a clear error; a fuzz of the .idx parser never crashes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/corpus/mmap_indexed_dataset.h"
#include "nlohmann/json.hpp"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

const std::string kFixtureDir = std::string(KELVIN_FIXTURES_DIR) + "/megatron/";

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Into a new file: rewriting one in place makes ext4 flush it to disk (auto_da_alloc), slowly.
void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

template <typename T>
T Load(const std::vector<uint8_t>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void Store(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

std::vector<int64_t> DocumentTokens(const TokenCorpus& corpus, int64_t document) {
  std::vector<int64_t> tokens(corpus.document_start(document + 1) -
                              corpus.document_start(document));
  corpus.Read(corpus.document_start(document), tokens);
  return tokens;
}

TEST(MegatronDataset, FixturesReadBackAsMegatronCoreWroteThem) {
  std::ifstream in(kFixtureDir + "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  for (const auto& [name, type] :
       {std::pair{"corpus_u16", TokenType::kUInt16}, std::pair{"corpus_i32", TokenType::kInt32}}) {
    SCOPED_TRACE(name);
    absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(kFixtureDir + name);
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    const nlohmann::json& want = expected[name];
    EXPECT_EQ(corpus->token_type(), type);
    const auto& documents = want["documents"];
    ASSERT_EQ(corpus->num_documents(), static_cast<int64_t>(documents.size()));
    ASSERT_EQ(corpus->num_documents(), 20);
    int64_t total = 0;
    for (int64_t d = 0; d < corpus->num_documents(); ++d) {
      EXPECT_EQ(corpus->document_start(d), total) << d;
      EXPECT_EQ(DocumentTokens(*corpus, d), documents[d].get<std::vector<int64_t>>()) << d;
      total += static_cast<int64_t>(documents[d].size());
    }
    EXPECT_EQ(corpus->num_tokens(), total);
    EXPECT_EQ(corpus->document_start(corpus->num_documents()), total);
    // Documents start where their first sequence does.
    const auto lengths = want["sequence_lengths"].get<std::vector<int64_t>>();
    const auto document_indices = want["document_indices"].get<std::vector<int64_t>>();
    ASSERT_EQ(static_cast<int64_t>(document_indices.size()), corpus->num_documents() + 1);
    EXPECT_GT(lengths.size(), documents.size());  // some documents have several sequences
    for (int64_t d = 0; d <= corpus->num_documents(); ++d) {
      const int64_t sequence_start =
          std::accumulate(lengths.begin(), lengths.begin() + document_indices[d], int64_t{0});
      EXPECT_EQ(corpus->document_start(d), sequence_start) << d;
    }
    EXPECT_TRUE(corpus->CheckVocab(expected["vocab_size"].get<int64_t>()).ok());
  }
}

TEST(MegatronDataset, PrefixMayCarryTheIdxOrBinSuffix) {
  for (const char* suffix : {".idx", ".bin"}) {
    absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(kFixtureDir + "corpus_u16" + suffix);
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    EXPECT_EQ(corpus->num_documents(), 20);
  }
}

TEST(MegatronDataset, MissingFilesAreNamed) {
  absl::Status status = OpenMegatronDataset(kFixtureDir + "no_such_corpus").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              HasSubstr("Megatron index file " + kFixtureDir + "no_such_corpus.idx: no such file"));

  const std::string prefix = ::testing::TempDir() + "megatron_idx_only";
  WriteBytes(prefix + ".idx", ReadBytes(kFixtureDir + "corpus_u16.idx"));
  status = OpenMegatronDataset(prefix).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("Megatron data file " + prefix + ".bin: no such file"));
}

// The u16 fixture's .idx and .bin, mutated by each test and opened from a temporary prefix.
class CorruptedIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    idx_ = ReadBytes(kFixtureDir + "corpus_u16.idx");
    bin_ = ReadBytes(kFixtureDir + "corpus_u16.bin");
    sequence_count_ = Load<uint64_t>(idx_, 18);
    document_count_ = Load<uint64_t>(idx_, 26);
    prefix_ = ::testing::TempDir() + "megatron_corrupted_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  size_t LengthOffset(uint64_t i) const { return kMegatronIndexHeaderBytes + 4 * i; }
  size_t PointerOffset(uint64_t i) const {
    return kMegatronIndexHeaderBytes + 4 * sequence_count_ + 8 * i;
  }
  size_t DocumentIndexOffset(uint64_t i) const {
    return kMegatronIndexHeaderBytes + 12 * sequence_count_ + 8 * i;
  }

  // Opens the mutated pair; the error must name the .idx or .bin it is about.
  absl::Status Open() {
    WriteBytes(prefix_ + ".idx", idx_);
    WriteBytes(prefix_ + ".bin", bin_);
    absl::Status status = OpenMegatronDataset(prefix_).status();
    if (!status.ok()) {
      EXPECT_THAT(status.message(), HasSubstr(prefix_));
    }
    return status;
  }

  std::vector<uint8_t> idx_, bin_;
  uint64_t sequence_count_ = 0, document_count_ = 0;
  std::string prefix_;
};

TEST_F(CorruptedIndex, UnchangedCopyOpens) { EXPECT_TRUE(Open().ok()); }

TEST_F(CorruptedIndex, BadMagic) {
  idx_[1] = 'X';
  const absl::Status status = Open();
  EXPECT_THAT(status.message(), HasSubstr("starts with \"MXIDIDX\\x00\\x00\", not the magic"));
  EXPECT_THAT(status.message(), HasSubstr("not a Megatron-LM indexed dataset"));
}

TEST_F(CorruptedIndex, BadVersion) {
  Store<uint64_t>(idx_, 9, 2);
  EXPECT_THAT(Open().message(), HasSubstr("field 'version' is 2; Megatron-LM writes"));
}

TEST_F(CorruptedIndex, UnknownDTypeCode) {
  idx_[17] = 9;
  EXPECT_THAT(Open().message(), HasSubstr("field 'dtype' is code 9, not an integer token type"));
}

TEST_F(CorruptedIndex, FloatDTypeCode) {
  idx_[17] = 6;
  EXPECT_THAT(Open().message(), HasSubstr("field 'dtype' is code 6"));
}

TEST_F(CorruptedIndex, TruncatedHeader) {
  idx_.resize(20);
  EXPECT_THAT(Open().message(), HasSubstr("is 20 bytes, shorter than the 34-byte header"));
}

TEST_F(CorruptedIndex, TruncatedArrays) {
  idx_.pop_back();
  const absl::Status status = Open();
  EXPECT_THAT(status.message(), HasSubstr("need " + std::to_string(idx_.size() + 1) + " bytes"));
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
}

TEST_F(CorruptedIndex, SequenceCountTooLarge) {
  Store<uint64_t>(idx_, 18, uint64_t{1} << 62);
  const absl::Status status = Open();
  EXPECT_THAT(status.message(), HasSubstr("fields 'sequence_count' 4611686018427387904"));
  EXPECT_THAT(status.message(), HasSubstr("the counts are corrupted"));
}

TEST_F(CorruptedIndex, DocumentCountSlightlyTooLarge) {
  Store<uint64_t>(idx_, 26, document_count_ + 1);
  EXPECT_THAT(Open().message(),
              HasSubstr("'document_count' " + std::to_string(document_count_ + 1) + " need"));
}

TEST_F(CorruptedIndex, ZeroDocumentCount) {
  Store<uint64_t>(idx_, 26, 0);
  EXPECT_THAT(Open().message(), HasSubstr("field 'document_count' is 0"));
}

TEST_F(CorruptedIndex, TrailingBytes) {
  idx_.insert(idx_.end(), {1, 2, 3});
  EXPECT_THAT(Open().message(), HasSubstr("with multimodal sequence modes): corrupted"));
}

TEST_F(CorruptedIndex, MultimodalSequenceModesAreAccepted) {
  idx_.insert(idx_.end(), sequence_count_, 0);
  absl::Status status = Open();
  EXPECT_TRUE(status.ok()) << status;
}

TEST_F(CorruptedIndex, NegativeSequenceLength) {
  Store<int32_t>(idx_, LengthOffset(2), -1);
  EXPECT_THAT(Open().message(), HasSubstr("sequence_lengths[2] is -1, a negative length"));
}

TEST_F(CorruptedIndex, PointerPastTheBin) {
  Store<int64_t>(idx_, PointerOffset(5), static_cast<int64_t>(bin_.size()) + 100);
  const absl::Status status = Open();
  EXPECT_THAT(status.message(),
              HasSubstr("sequence_pointers[5] = " + std::to_string(bin_.size() + 100)));
  EXPECT_THAT(status.message(), HasSubstr("reaches past the end of"));
}

TEST_F(CorruptedIndex, NegativePointer) {
  Store<int64_t>(idx_, PointerOffset(0), -8);
  EXPECT_THAT(Open().message(), HasSubstr("sequence_pointers[0] = -8"));
}

TEST_F(CorruptedIndex, PointerOutOfPlace) {
  const auto pointer = Load<int64_t>(idx_, PointerOffset(3));
  Store<int64_t>(idx_, PointerOffset(3), pointer + 2);
  EXPECT_THAT(Open().message(), HasSubstr("sequence_pointers[3] is " + std::to_string(pointer + 2) +
                                          ", but the lengths before it place sequence 3 at byte " +
                                          std::to_string(pointer)));
}

TEST_F(CorruptedIndex, TruncatedBin) {
  bin_.erase(bin_.end() - 2, bin_.end());
  const absl::Status status = Open();
  EXPECT_THAT(status.message(),
              HasSubstr("sequence_pointers[" + std::to_string(sequence_count_ - 1) + "]"));
  EXPECT_THAT(status.message(), HasSubstr("the .bin is truncated"));
}

TEST_F(CorruptedIndex, BinLongerThanTheIndexSays) {
  bin_.insert(bin_.end(), {0, 0});
  EXPECT_THAT(Open().message(), HasSubstr("the .idx and .bin do not belong together"));
}

TEST_F(CorruptedIndex, FirstDocumentIndexNotZero) {
  Store<int64_t>(idx_, DocumentIndexOffset(0), 1);
  EXPECT_THAT(Open().message(), HasSubstr("document_indices[0] is 1, but it must be 0"));
}

TEST_F(CorruptedIndex, DecreasingDocumentIndex) {
  const auto previous = Load<int64_t>(idx_, DocumentIndexOffset(4));
  Store<int64_t>(idx_, DocumentIndexOffset(5), previous - 1);
  EXPECT_THAT(Open().message(), HasSubstr("document_indices[5] is " + std::to_string(previous - 1) +
                                          ", outside [" + std::to_string(previous) + ", "));
}

TEST_F(CorruptedIndex, DocumentIndexPastTheSequences) {
  Store<int64_t>(idx_, DocumentIndexOffset(3), static_cast<int64_t>(sequence_count_) + 1);
  EXPECT_THAT(Open().message(),
              HasSubstr("document_indices[3] is " + std::to_string(sequence_count_ + 1)));
}

TEST_F(CorruptedIndex, LastDocumentIndexShort) {
  Store<int64_t>(idx_, DocumentIndexOffset(document_count_ - 1),
                 static_cast<int64_t>(sequence_count_) - 1);
  EXPECT_THAT(Open().message(),
              HasSubstr("the last document index is " + std::to_string(sequence_count_ - 1) +
                        ", but it must equal 'sequence_count'"));
}

// Deterministic random mutations of the .idx: every outcome is a clean open (then every token
// reads) or an error about the index; never a crash (run it under KELVIN_SANITIZE too).
TEST_F(CorruptedIndex, FuzzedIndexNeverCrashes) {
  const std::vector<uint8_t> original = idx_;
  std::mt19937_64 rng(20240611);
  const std::vector<int64_t> interesting = {0,
                                            1,
                                            -1,
                                            2,
                                            34,
                                            int64_t{1} << 31,
                                            int64_t{1} << 62,
                                            INT64_MAX,
                                            INT64_MIN,
                                            static_cast<int64_t>(bin_.size())};
  // The mutations must reach every stage of the validation.
  const std::vector<const char*> kChecks = {"header",
                                            "magic",
                                            "'version'",
                                            "'dtype'",
                                            "need",
                                            "describe",
                                            "sequence_lengths[",
                                            "reaches past the end",
                                            "the lengths before it place",
                                            "document_indices[",
                                            "the last document index"};
  std::set<std::string> checks_hit;
  // Where the fields start (a 4-byte sequence length is written with its neighbour).
  std::vector<size_t> fields = {9, 18, 26};
  for (uint64_t i = 0; i < sequence_count_; ++i) {
    fields.push_back(LengthOffset(i));
    fields.push_back(PointerOffset(i));
  }
  for (uint64_t i = 0; i < document_count_; ++i) fields.push_back(DocumentIndexOffset(i));

  int opened = 0;
  for (int iteration = 0; iteration < 1500; ++iteration) {
    idx_ = original;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations && !idx_.empty(); ++m) {
      const size_t at = rng() % idx_.size();
      switch (rng() % 5) {
        case 0:  // one random byte
          idx_[at] = static_cast<uint8_t>(rng());
          break;
        case 1:  // a field set to an interesting value
          if (const size_t field = fields[rng() % fields.size()]; field + 8 <= idx_.size()) {
            Store<int64_t>(idx_, field, interesting[rng() % interesting.size()]);
          }
          break;
        case 2:  // a field off by one
          if (const size_t field = fields[rng() % fields.size()]; field + 8 <= idx_.size()) {
            Store<int64_t>(idx_, field, Load<int64_t>(idx_, field) + (rng() % 2 ? 1 : -1));
          }
          break;
        case 3:  // truncated
          idx_.resize(at);
          break;
        default:  // garbage appended
          for (int extra = static_cast<int>(rng() % 16); extra > 0; --extra) {
            idx_.push_back(static_cast<uint8_t>(rng()));
          }
      }
    }
    WriteBytes(prefix_ + ".idx", idx_);
    if (iteration == 0) WriteBytes(prefix_ + ".bin", bin_);
    absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(prefix_);
    if (!corpus.ok()) {
      const std::string message(corpus.status().message());
      EXPECT_THAT(message, HasSubstr("Megatron index file")) << iteration;
      for (const char* check : kChecks) {
        if (message.find(check) != std::string::npos) checks_hit.insert(check);
      }
      continue;
    }
    ++opened;
    std::vector<int64_t> all(corpus->num_tokens());
    corpus->Read(0, all);
    for (int64_t d = 0; d < corpus->num_documents(); ++d) {
      EXPECT_LE(corpus->document_start(d), corpus->document_start(d + 1));
    }
  }
  EXPECT_EQ(checks_hit, std::set<std::string>(kChecks.begin(), kChecks.end()));
  // Some mutations leave a valid index (e.g. a document boundary moved between its neighbours);
  // most do not.
  EXPECT_LT(opened, 1500);
  EXPECT_GT(opened, 10) << "the reads after a valid mutation went untested";
}

}  // namespace
}  // namespace kelvin::data
