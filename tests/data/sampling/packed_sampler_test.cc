// PackedSampler: whole documents in rows (best-fit decreasing: a known packing), every document
// once per epoch and never split, labels inside documents only, padding without loss, positions
// restarting per document (or running over the row without document masking), documents longer
// than T cut and counted, the loss mask applied, resume-deterministic batches, the held-out
// stretch disjoint from training, and a stretch with nothing to pack is an error.
#include "data/sampling/packed_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/ops/cross_entropy.h"
#include "tests/data/written_corpus.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<PackedSampler> Packed(std::shared_ptr<const TokenCorpus> corpus,
                                      const SamplerOptions& options) {
  absl::StatusOr<std::unique_ptr<PackedSampler>> sampler =
      PackedSampler::Create(std::move(corpus), options);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return sampler.ok() ? std::move(*sampler) : nullptr;
}

const SamplerOptions kOptions = {.sequence_length = 10,
                                 .micro_batch_size = 2,
                                 .vocab_size = 100000,
                                 .seed = 3,
                                 .document_masking = true};

std::vector<int32_t> RowOf(const Tensor& t, int64_t b, int64_t t_len) {
  return {t.data<int32_t>() + b * t_len, t.data<int32_t>() + (b + 1) * t_len};
}

constexpr int32_t kNo = ops::kIgnoreIndex;

TEST(PackedSampler, PacksBestFitDecreasing) {
  // Documents of 6, 4, 5, 5, 3, 3, 2 tokens (stream starts 0, 6, 10, 15, 20, 23, 26), T = 10:
  // longest first, each into the fullest row it fits: {6, 4}, {5, 5}, {3, 3, 2}.
  auto sampler = Packed(WrittenCorpus("bfd", {6, 4, 5, 5, 3, 3, 2}), kOptions);
  ASSERT_EQ(sampler->num_rows(), 3);
  EXPECT_EQ(sampler->num_documents(), 7);
  EXPECT_EQ(sampler->packed_tokens(), 28);
  EXPECT_EQ(sampler->truncated_documents(), 0);
  absl::StatusOr<Batch> batch = sampler->ReadRows({{0, 1, 2}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->documents[0], (std::vector<DocumentSpan>{{0, 0, 6}, {1, 6, 10}}));
  EXPECT_EQ(batch->documents[1], (std::vector<DocumentSpan>{{2, 0, 5}, {3, 5, 10}}));
  EXPECT_EQ(batch->documents[2], (std::vector<DocumentSpan>{
                                     {4, 0, 3}, {5, 3, 6}, {6, 6, 8}, {kPaddingDocument, 8, 10}}));
  // Row 2: documents 4 (tokens 21..23), 5 (24..26), 6 (27, 28), then padding.
  EXPECT_EQ(RowOf(batch->tokens, 2, 10),
            (std::vector<int32_t>{21, 22, 23, 24, 25, 26, 27, 28, 0, 0}));
  EXPECT_EQ(RowOf(batch->labels, 2, 10),
            (std::vector<int32_t>{22, 23, kNo, 25, 26, kNo, 28, kNo, kNo, kNo}));
  EXPECT_EQ(RowOf(batch->positions, 2, 10), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 0, 1}));
  EXPECT_EQ(RowOf(batch->tokens, 0, 10), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(RowOf(batch->labels, 0, 10), (std::vector<int32_t>{2, 3, 4, 5, 6, kNo, 8, 9, 10, kNo}));
}

TEST(PackedSampler, WithoutDocumentMaskingPositionsRunOverTheRow) {
  SamplerOptions options = kOptions;
  options.document_masking = false;
  auto sampler = Packed(WrittenCorpus("unmasked", {6, 4, 5, 5, 3, 3, 2}), options);
  absl::StatusOr<Batch> batch = sampler->ReadRows({{2}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(RowOf(batch->positions, 0, 10), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // Labels still stop at each document's end: the next sample is not its continuation.
  EXPECT_EQ(RowOf(batch->labels, 0, 10),
            (std::vector<int32_t>{22, 23, kNo, 25, 26, kNo, 28, kNo, kNo, kNo}));
}

TEST(PackedSampler, EveryDocumentOncePerEpochNeverSplit) {
  std::vector<int64_t> lengths;
  for (int d = 0; d < 200; ++d) lengths.push_back(1 + (d * 37) % 29);  // 1..29 tokens
  SamplerOptions options = kOptions;
  options.sequence_length = 32;
  auto corpus = WrittenCorpus("epochs", lengths);
  auto sampler = Packed(corpus, options);
  const int64_t rows = sampler->num_rows();
  std::vector<std::multiset<int64_t>> seen(2);  // documents of each epoch
  for (int64_t g = 0; g < 2 * rows; ++g) {
    const int64_t row = sampler->RowOfSample(g);
    absl::StatusOr<Batch> batch = sampler->ReadRows({{row}});
    ASSERT_TRUE(batch.ok()) << batch.status();
    int64_t covered = 0;
    for (const DocumentSpan& span : batch->documents[0]) {
      EXPECT_EQ(span.begin, covered);
      covered = span.end;
      if (span.document == kPaddingDocument) continue;
      seen[g / rows].insert(span.document);
      // The whole document, in order.
      EXPECT_EQ(span.end - span.begin, lengths[span.document]);
      EXPECT_EQ(batch->tokens.data<int32_t>()[span.begin],
                corpus->document_start(span.document) + 1);
    }
    EXPECT_EQ(covered, 32);
  }
  std::multiset<int64_t> all;  // the documents with a label: 2 tokens or more
  for (int64_t d = 0; d < 200; ++d) {
    if (lengths[d] >= 2) all.insert(d);
  }
  EXPECT_EQ(seen[0], all);
  EXPECT_EQ(seen[1], all);
  EXPECT_EQ(sampler->num_documents(), static_cast<int64_t>(all.size()));
  // Best-fit decreasing leaves little padding: within 5% of the ideal row count here.
  EXPECT_LE(rows, (sampler->packed_tokens() + 31) / 32 * 105 / 100);
}

TEST(PackedSampler, LongDocumentsKeepTheirFirstTTokens) {
  auto sampler = Packed(WrittenCorpus("long", {25, 3}), kOptions);
  EXPECT_EQ(sampler->truncated_documents(), 1);
  EXPECT_EQ(sampler->truncated_without_targets(), 0);  // no loss mask: every token a target
  EXPECT_EQ(sampler->num_rows(), 2);
  absl::StatusOr<Batch> batch = sampler->ReadRows({{0}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(RowOf(batch->tokens, 0, 10), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  // The last kept token is labelled with the document's next one, 11.
  EXPECT_EQ(RowOf(batch->labels, 0, 10), (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(PackedSampler, CountsCutDocumentsThatLoseEveryTarget) {
  // Document 0 (offsets 0..13) has its answer at 12..13, beyond the cut after 10 tokens (labels
  // predict offsets 1..10); document 1 (offsets 14..27) has one at 20, kept.
  auto corpus = WrittenCorpus("cut_answers", {14, 14}, [](int64_t offset) {
    return offset == 12 || offset == 13 || offset == 20;
  });
  auto sampler = Packed(corpus, kOptions);
  EXPECT_EQ(sampler->truncated_documents(), 2);
  EXPECT_EQ(sampler->truncated_without_targets(), 1);
}

TEST(PackedSampler, TheLossMaskKeepsOnlyTargets) {
  // Targets: stream offsets 3, 4 (the "answer" of document 0) and 8 (of document 1).
  auto corpus = WrittenCorpus(
      "masked", {5, 4}, [](int64_t offset) { return offset == 3 || offset == 4 || offset == 8; });
  auto sampler = Packed(corpus, kOptions);
  ASSERT_EQ(sampler->num_rows(), 1);
  absl::StatusOr<Batch> batch = sampler->ReadRows({{0}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(RowOf(batch->tokens, 0, 10), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0}));
  // Input t predicts token t + 1 of its document: only the predictions of offsets 3, 4 and 8.
  EXPECT_EQ(RowOf(batch->labels, 0, 10),
            (std::vector<int32_t>{kNo, kNo, 4, 5, kNo, kNo, kNo, 9, kNo, kNo}));
}

TEST(PackedSampler, BatchesAreDeterministicAndHeldOutIsDisjoint) {
  std::vector<int64_t> lengths(60, 7);
  auto corpus = WrittenCorpus("resume", lengths);
  SamplerOptions train = kOptions;
  train.stream_end = 50 * 7;
  // 50 documents of 7 tokens: 50 rows, 25 steps of 2 rows an epoch; steps 0..39 span two epochs.
  auto walked = Packed(corpus, train);
  std::vector<Batch> batches;
  for (int64_t step = 0; step < 40; ++step) {
    absl::StatusOr<Batch> batch = walked->BatchAt({.step = step});
    ASSERT_TRUE(batch.ok()) << batch.status();
    batches.push_back(std::move(*batch));
  }
  EXPECT_NE(batches[3].sources, batches[28].sources);  // epoch 1 has its own order
  // A resumed job's fresh sampler, asked for later steps directly and out of order.
  auto resumed = Packed(corpus, train);
  for (int64_t step : {37, 9, 26, 0}) {
    absl::StatusOr<Batch> batch = resumed->BatchAt({.step = step});
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->sources, batches[step].sources) << step;
    EXPECT_EQ(RowOf(batch->tokens, 1, 10), RowOf(batches[step].tokens, 1, 10)) << step;
    EXPECT_EQ(RowOf(batch->labels, 0, 10), RowOf(batches[step].labels, 0, 10)) << step;
  }
  SamplerOptions held_out = kOptions;
  held_out.stream_begin = 50 * 7;
  auto eval = Packed(corpus, held_out);
  EXPECT_EQ(walked->num_documents(), 50);
  EXPECT_EQ(eval->num_documents(), 10);
  absl::StatusOr<Batch> batch = eval->ReadRows({{0}});
  ASSERT_TRUE(batch.ok());
  EXPECT_GE(batch->documents[0][0].document, 50);
}

TEST(PackedSampler, NothingToPackIsAnError) {
  auto corpus = WrittenCorpus("empty", {1, 1, 1});
  const absl::StatusOr<std::unique_ptr<PackedSampler>> sampler =
      PackedSampler::Create(corpus, kOptions);
  EXPECT_THAT(sampler.status().message(),
              HasSubstr("has no document of 2 or more tokens to pack into rows"));
}

}  // namespace
}  // namespace kelvin::data
