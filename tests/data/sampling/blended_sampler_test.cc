// BlendedSampler: each corpus's share of the samples stays within one sample of its weight at
// every point, random access equals the sequential order (across the cached blocks), each corpus
// gives its own samples in its own order, and data-parallel ranks split the same global batch.
#include "data/sampling/blended_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "data/corpus/token_file.h"
#include "data/sampling/sampler.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

// A corpus of `num_tokens` tokens valued base + offset (so a row tells its corpus and place).
std::unique_ptr<CorpusSampler> OffsetSampler(const std::string& name, int32_t base,
                                             int32_t num_tokens, uint64_t seed) {
  const std::string path = ::testing::TempDir() + name + ".i32";
  std::vector<int32_t> tokens(num_tokens);
  std::iota(tokens.begin(), tokens.end(), base);
  EXPECT_TRUE(WriteTokenFile(path, tokens, TokenType::kInt32).ok());
  absl::StatusOr<TokenCorpus> corpus = OpenTokenFile(path);
  EXPECT_TRUE(corpus.ok()) << corpus.status();
  absl::StatusOr<std::unique_ptr<CorpusSampler>> sampler = CorpusSampler::Create(
      std::make_shared<const TokenCorpus>(std::move(*corpus)),
      {.sequence_length = 8, .micro_batch_size = 4, .vocab_size = 100000, .seed = seed});
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return std::move(*sampler);
}

std::unique_ptr<BlendedSampler> Blend(const std::vector<double>& weights) {
  std::vector<std::unique_ptr<RowSampler>> corpora;
  for (size_t j = 0; j < weights.size(); ++j) {
    corpora.push_back(OffsetSampler("blend_" + std::to_string(j), static_cast<int32_t>(j) * 10000,
                                    801 + 80 * static_cast<int32_t>(j), j + 1));
  }
  absl::StatusOr<std::unique_ptr<BlendedSampler>> blend =
      BlendedSampler::Create(std::move(corpora), weights);
  EXPECT_TRUE(blend.ok()) << blend.status();
  return std::move(*blend);
}

TEST(BlendedSampler, SharesFollowTheWeightsWithinOneSampleEverywhere) {
  for (const std::vector<double>& weights :
       std::vector<std::vector<double>>{{0.7, 0.3}, {1, 1, 1}, {5, 2, 2, 1}, {0.01, 0.99}}) {
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    std::unique_ptr<BlendedSampler> blend = Blend(weights);
    std::vector<int64_t> counts(weights.size(), 0);
    for (int64_t g = 0; g < 10000; ++g) {  // past the first cached block of 4096
      const BlendedSampler::Assignment a = blend->AssignmentOf(g);
      ASSERT_EQ(a.sample, counts[a.corpus]) << "sample " << g;  // each corpus in its own order
      ++counts[a.corpus];
      for (size_t j = 0; j < weights.size(); ++j) {
        ASSERT_LE(std::abs(static_cast<double>(counts[j]) - weights[j] / total * (g + 1)), 1.0)
            << "corpus " << j << " after " << g + 1 << " samples";
      }
    }
  }
}

TEST(BlendedSampler, RandomAccessEqualsTheSequentialOrder) {
  std::unique_ptr<BlendedSampler> sequential = Blend({5, 2, 2, 1});
  std::vector<BlendedSampler::Assignment> order;
  for (int64_t g = 0; g < 13000; ++g) order.push_back(sequential->AssignmentOf(g));
  std::unique_ptr<BlendedSampler> jumping = Blend({5, 2, 2, 1});
  for (const int64_t g : {12999, 17, 8192, 4095, 4096, 0, 9000}) {  // a resume, then back
    const BlendedSampler::Assignment a = jumping->AssignmentOf(g);
    EXPECT_EQ(a.corpus, order[g].corpus) << g;
    EXPECT_EQ(a.sample, order[g].sample) << g;
  }
}

TEST(BlendedSampler, BatchesTakeEachRowFromItsCorpusAndSplitOverRanks) {
  std::unique_ptr<BlendedSampler> blend = Blend({0.7, 0.3});
  std::unique_ptr<CorpusSampler> first = OffsetSampler("blend_0", 0, 801, 1);
  std::unique_ptr<CorpusSampler> second = OffsetSampler("blend_1", 10000, 881, 2);
  // Step 3 of a global batch of 2 ranks x 4 rows: each rank's rows are its part of the 8 samples.
  for (int64_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<Batch> batch = blend->BatchAt({.step = 3, .dp_rank = rank, .dp_size = 2});
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (int64_t b = 0; b < 4; ++b) {
      const BlendedSampler::Assignment a = blend->AssignmentOf(3 * 8 + rank * 4 + b);
      CorpusSampler& corpus = a.corpus == 0 ? *first : *second;
      const int64_t row = corpus.RowOfSample(a.sample);
      EXPECT_EQ(batch->sources[b], row);
      EXPECT_EQ(batch->tokens.data<int32_t>()[b * 8], a.corpus * 10000 + row * 8) << b;
    }
  }
}

TEST(BlendedSampler, BadWeightsAreErrors) {
  std::vector<std::unique_ptr<RowSampler>> corpora;
  corpora.push_back(OffsetSampler("blend_bad", 0, 100, 1));
  EXPECT_THAT(BlendedSampler::Create(std::move(corpora), {0.0}).status().message(),
              HasSubstr("blend corpus 0 has weight 0: weights must be positive"));
  EXPECT_THAT(BlendedSampler::Create({}, {}).status().message(), HasSubstr("at least one corpus"));
}

}  // namespace
}  // namespace kelvin::data
