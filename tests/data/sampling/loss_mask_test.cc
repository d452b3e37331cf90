// Loss masks: stream rows (CorpusSampler) keep the labels whose targets the mask marks and ignore
// the others; a mask written from other samples, holding a value other than 0/1, or without any
// target, is an error naming the files (and the document and the position).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/ops/cross_entropy.h"
#include "data/sampling/sampler.h"
#include "tests/data/written_corpus.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kNo = ops::kIgnoreIndex;

TEST(LossMask, StreamRowsKeepOnlyTargets) {
  // Targets: every stream offset divisible by 3.
  auto corpus =
      WrittenCorpus("stream_mask", {7, 9}, [](int64_t offset) { return offset % 3 == 0; });
  absl::StatusOr<std::unique_ptr<CorpusSampler>> sampler = CorpusSampler::Create(
      corpus, {.sequence_length = 5, .micro_batch_size = 1, .vocab_size = 100, .seed = 1});
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  absl::StatusOr<Batch> batch = (*sampler)->ReadRows({{1}});  // stream tokens [5, 11)
  ASSERT_TRUE(batch.ok()) << batch.status();
  const int32_t* tokens = batch->tokens.data<int32_t>();
  const int32_t* labels = batch->labels.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(tokens, tokens + 5), (std::vector<int32_t>{6, 7, 8, 9, 10}));
  // Label t is stream token 6 + t (value 7 + t): kept for offsets 6 and 9.
  EXPECT_EQ(std::vector<int32_t>(labels, labels + 5), (std::vector<int32_t>{7, kNo, kNo, 10, kNo}));
}

TEST(LossMask, AMaskOfOtherSamplesIsAnError) {
  WrittenCorpus("mask_owner", {4, 6});
  WrittenCorpus("mask_other_lengths", {5, 5});
  WrittenCorpus("mask_other_count", {10});
  const std::string written = ::testing::TempDir() + "/written_corpus_";
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(written + "mask_owner");
  absl::StatusOr<TokenCorpus> other_lengths =
      OpenMegatronDataset(written + "mask_other_lengths_mask");
  absl::StatusOr<TokenCorpus> other_count = OpenMegatronDataset(written + "mask_other_count_mask");
  ASSERT_TRUE(corpus.ok() && other_lengths.ok() && other_count.ok());
  EXPECT_THAT(corpus->AttachLossMask(std::move(*other_lengths)).message(),
              HasSubstr("mask_other_lengths_mask.bin': document 0 has 5 tokens, but document 0 "
                        "of the corpus '" +
                        written + "mask_owner.bin' has 4"));
  EXPECT_THAT(corpus->AttachLossMask(std::move(*other_count)).message(),
              HasSubstr("has 1 documents of 10 tokens, but the corpus '" + written +
                        "mask_owner.bin' has 2 documents of 10 tokens"));
  EXPECT_FALSE(corpus->has_loss_mask());
}

TEST(LossMask, AMaskWithoutTargetsIsAnError) {
  // Every sample's labels -100: a run would skip every step and report a held-out loss of 0.
  WrittenCorpus("mask_none", {4, 6});  // its mask is all zeros
  const std::string written = ::testing::TempDir() + "/written_corpus_mask_none";
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(written);
  absl::StatusOr<TokenCorpus> mask = OpenMegatronDataset(written + "_mask");
  ASSERT_TRUE(corpus.ok() && mask.ok());
  EXPECT_THAT(corpus->AttachLossMask(std::move(*mask)).message(),
              HasSubstr("loss mask '" + written + "_mask.bin' marks none of the 10 tokens of '" +
                        written + ".bin' as a training target (every value is 0)"));
  EXPECT_FALSE(corpus->has_loss_mask());
}

TEST(LossMask, ValuesOtherThanZeroAndOneAreErrors) {
  const std::string prefix = ::testing::TempDir() + "/loss_mask_values";
  for (const auto& [suffix, values] : {std::pair{"", std::vector<int64_t>{5, 6, 7, 8}},
                                       std::pair{"_mask", std::vector<int64_t>{1, 0, 2, 1}}}) {
    absl::StatusOr<MegatronDatasetWriter> writer =
        MegatronDatasetWriter::Create(prefix + suffix, TokenType::kUInt8);
    ASSERT_TRUE(writer.ok() && writer->AddSequence(values).ok() && writer->Finish().ok() &&
                writer->Commit().ok());
  }
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(prefix);
  absl::StatusOr<TokenCorpus> mask = OpenMegatronDataset(prefix + "_mask");
  ASSERT_TRUE(corpus.ok() && mask.ok());
  ASSERT_TRUE(corpus->AttachLossMask(std::move(*mask)).ok());
  std::vector<uint8_t> targets(4);
  EXPECT_THAT(corpus->ReadLossMask(0, targets).message(),
              HasSubstr("loss mask '" + prefix + "_mask.bin': document 0, position 2 holds 2"));
  std::vector<uint8_t> first_two(2);
  ASSERT_TRUE(corpus->ReadLossMask(0, first_two).ok());
  EXPECT_EQ(first_two, (std::vector<uint8_t>{1, 0}));
}

}  // namespace
}  // namespace kelvin::data
