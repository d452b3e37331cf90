// CorpusSampler: GPT-style rows, every row once per epoch, deterministic batches for any
// (step, micro-batch, DP rank), disjoint DP ranks, document spans, positions restarting at
// documents and no loss across them when documents mask, the held-out split (document-aligned
// when it can be, disjoint from training), and the errors for a corpus too short for T, tokens
// outside the vocabulary and bad options.
#include "data/sampling/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/io/mapped_file.h"
#include "core/ops/cross_entropy.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "data/corpus/token_file.h"
#include "nlohmann/json.hpp"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;

// N tokens whose values are their stream offsets (so a row tells where it came from), cut into
// documents at `document_starts` [D + 1].
std::shared_ptr<const TokenCorpus> OffsetCorpus(const std::string& name, int32_t num_tokens,
                                                std::vector<int64_t> document_starts) {
  const std::string path = ::testing::TempDir() + name + ".i32";
  std::vector<int32_t> tokens(num_tokens);  // [N]
  std::iota(tokens.begin(), tokens.end(), 0);
  EXPECT_TRUE(WriteTokenFile(path, tokens, TokenType::kInt32).ok());
  absl::StatusOr<io::MappedFile> file = io::MappedFile::Open(path, "token file");
  EXPECT_TRUE(file.ok()) << file.status();
  return std::make_shared<const TokenCorpus>(std::move(*file), TokenType::kInt32,
                                             std::move(document_starts));
}

std::unique_ptr<CorpusSampler> MakeSampler(std::shared_ptr<const TokenCorpus> corpus,
                                           const SamplerOptions& options) {
  absl::StatusOr<std::unique_ptr<CorpusSampler>> sampler =
      CorpusSampler::Create(std::move(corpus), options);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return sampler.ok() ? std::move(*sampler) : nullptr;
}

std::vector<int32_t> Values(const Tensor& t) {
  return {t.data<int32_t>(), t.data<int32_t>() + t.numel()};
}

const SamplerOptions kOptions = {
    .sequence_length = 10, .micro_batch_size = 4, .vocab_size = 1001, .seed = 5};

TEST(Sampler, RowsAreGptStyle) {
  auto sampler = MakeSampler(OffsetCorpus("sampler_rows", 1001, {0, 1001}), kOptions);
  EXPECT_EQ(sampler->num_rows(), 100);  // (N - 1) / T
  absl::StatusOr<Batch> batch = sampler->ReadRows({{0, 37, 99}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t row = batch->sources[b];
    for (int64_t t = 0; t < 10; ++t) {
      EXPECT_EQ(batch->tokens.data<int32_t>()[b * 10 + t], row * 10 + t);
      EXPECT_EQ(batch->labels.data<int32_t>()[b * 10 + t], row * 10 + t + 1);
      EXPECT_EQ(batch->positions.data<int32_t>()[b * 10 + t], t);
    }
    EXPECT_EQ(batch->documents[b], (std::vector<DocumentSpan>{{0, 0, 10}}));
  }
  EXPECT_EQ(batch->sources, (std::vector<int64_t>{0, 37, 99}));
}

TEST(Sampler, EachEpochVisitsEveryRowOnceInItsOwnOrder) {
  auto sampler = MakeSampler(OffsetCorpus("sampler_epochs", 1001, {0, 1001}), kOptions);
  std::vector<std::vector<int64_t>> epochs(2);
  for (int64_t step = 0; step < 50; ++step) {  // 4 rows a step, 100 rows an epoch
    absl::StatusOr<Batch> batch = sampler->BatchAt({.step = step});
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (int64_t b = 0; b < 4; ++b) {
      EXPECT_EQ(batch->tokens.data<int32_t>()[b * 10], batch->sources[b] * 10);
      epochs[step / 25].push_back(batch->sources[b]);
    }
  }
  for (const std::vector<int64_t>& rows : epochs) {
    std::vector<int64_t> sorted = rows;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(100);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epochs[0], identity);  // shuffled
}

TEST(Sampler, BatchesAreDeterministicForResume) {
  auto corpus = OffsetCorpus("sampler_resume", 1001, {0, 300, 301, 1001});
  SamplerOptions options = kOptions;
  options.document_masking = true;
  auto uninterrupted = MakeSampler(corpus, options);
  std::vector<Batch> walked;
  for (int64_t step = 0; step < 40; ++step)
    walked.push_back(*uninterrupted->BatchAt({.step = step}));
  // A fresh sampler (a resumed job) asked for later steps directly, out of order.
  auto resumed = MakeSampler(corpus, options);
  for (int64_t step : {37, 12, 39, 26}) {
    absl::StatusOr<Batch> batch = resumed->BatchAt({.step = step});
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->sources, walked[step].sources) << step;
    EXPECT_EQ(Values(batch->tokens), Values(walked[step].tokens)) << step;
    EXPECT_EQ(Values(batch->labels), Values(walked[step].labels)) << step;
    EXPECT_EQ(Values(batch->positions), Values(walked[step].positions)) << step;
    EXPECT_EQ(batch->documents, walked[step].documents) << step;
  }
  options.seed = 6;
  auto other_seed = MakeSampler(corpus, options);
  EXPECT_NE(other_seed->BatchAt({.step = 3})->sources, walked[3].sources);
}

TEST(Sampler, DataParallelRanksGetDisjointRowsOfTheSameGlobalBatch) {
  SamplerOptions options = kOptions;
  options.micro_batch_size = 3;
  auto sampler = MakeSampler(OffsetCorpus("sampler_dp", 1001, {0, 1001}), options);
  for (int64_t step : {0, 3}) {
    std::set<int64_t> split_rows, single_rank_rows;
    for (int64_t rank = 0; rank < 4; ++rank) {
      for (int64_t micro = 0; micro < 2; ++micro) {
        const Batch batch = *sampler->BatchAt({.step = step,
                                               .micro_batch = micro,
                                               .micro_batches = 2,
                                               .dp_rank = rank,
                                               .dp_size = 4});
        split_rows.insert(batch.sources.begin(), batch.sources.end());
      }
    }
    EXPECT_EQ(split_rows.size(), 24u) << "rows shared between ranks or micro-batches";
    for (int64_t micro = 0; micro < 8; ++micro) {
      const Batch batch =
          *sampler->BatchAt({.step = step, .micro_batch = micro, .micro_batches = 8});
      single_rank_rows.insert(batch.sources.begin(), batch.sources.end());
    }
    EXPECT_EQ(split_rows, single_rank_rows) << "the global batch depends on the DP split";
  }
}

TEST(Sampler, DocumentSpansAndMasking) {
  // Documents: 0 [0, 7), 1 empty, 2 [7, 25), 3 [25, 40), 4 [40, 101).
  auto corpus = OffsetCorpus("sampler_documents", 101, {0, 7, 7, 25, 40, 101});
  SamplerOptions options = kOptions;
  options.vocab_size = 101;
  const std::vector<int64_t> rows = {0, 2, 3, 5};
  const std::vector<std::vector<DocumentSpan>> spans = {
      {{0, 0, 7}, {2, 7, 10}}, {{2, 0, 5}, {3, 5, 10}}, {{3, 0, 10}}, {{4, 0, 10}}};

  auto plain = MakeSampler(corpus, options);
  const Batch unmasked = *plain->ReadRows(rows);
  EXPECT_EQ(unmasked.documents, spans);
  for (int64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(unmasked.positions.data<int32_t>()[i], i % 10);
    EXPECT_EQ(unmasked.labels.data<int32_t>()[i], rows[i / 10] * 10 + i % 10 + 1);
  }

  options.document_masking = true;
  auto masking = MakeSampler(corpus, options);
  const Batch masked = *masking->ReadRows(rows);
  EXPECT_EQ(masked.documents, spans);
  EXPECT_EQ(Values(masked.tokens), Values(unmasked.tokens));
  EXPECT_EQ(Values(masked.positions),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2,     // row 0: documents 0, 2
                                  0, 1, 2, 3, 4, 0, 1, 2, 3, 4,     // row 2: documents 2, 3
                                  0, 1, 2, 3, 4, 5, 6, 7, 8, 9,     // row 3: document 3
                                  0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // row 5: document 4
  // No loss on a document's last token (its label is the next document's first), including
  // document 3's end at the last position of row 3.
  const std::set<int64_t> ignored = {6, 14, 29};
  for (int64_t i = 0; i < 40; ++i) {
    const int32_t label = masked.labels.data<int32_t>()[i];
    if (ignored.count(i)) {
      EXPECT_EQ(label, ops::kIgnoreIndex) << i;
    } else {
      EXPECT_EQ(label, unmasked.labels.data<int32_t>()[i]) << i;
    }
  }
}

TEST(Sampler, MegatronFixtureRowsFollowItsDocuments) {
  std::ifstream in(std::string(KELVIN_FIXTURES_DIR) + "/megatron/expected.json");
  const nlohmann::json documents = nlohmann::json::parse(in)["corpus_u16"]["documents"];
  std::vector<int64_t> stream, starts = {0};
  for (const auto& document : documents) {
    for (const int64_t token : document.get<std::vector<int64_t>>()) stream.push_back(token);
    starts.push_back(static_cast<int64_t>(stream.size()));
  }
  absl::StatusOr<TokenCorpus> corpus =
      OpenMegatronDataset(std::string(KELVIN_FIXTURES_DIR) + "/megatron/corpus_u16");
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  auto sampler = MakeSampler(std::make_shared<const TokenCorpus>(std::move(*corpus)),
                             {.sequence_length = 64,
                              .micro_batch_size = 2,
                              .vocab_size = 1000,
                              .seed = 1,
                              .document_masking = true});
  for (int64_t step = 0; step < sampler->num_rows() / 2; ++step) {
    const Batch batch = *sampler->BatchAt({.step = step});
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t begin = batch.sources[b] * 64;
      for (int64_t t = 0; t < 64; ++t) {
        EXPECT_EQ(batch.tokens.data<int32_t>()[b * 64 + t], stream[begin + t]);
      }
      for (const DocumentSpan& span : batch.documents[b]) {
        EXPECT_LE(starts[span.document], begin + span.begin);
        EXPECT_GE(starts[span.document + 1], begin + span.end);
        EXPECT_TRUE(span.begin == 0 || starts[span.document] == begin + span.begin);
        EXPECT_EQ(batch.positions.data<int32_t>()[b * 64 + span.begin], 0);
      }
    }
  }
}

TEST(Sampler, SequenceLongerThanTheCorpus) {
  auto corpus = OffsetCorpus("sampler_short", 1000, {0, 1000});
  SamplerOptions options = kOptions;
  options.sequence_length = 999;
  EXPECT_EQ(MakeSampler(corpus, options)->num_rows(), 1);
  options.sequence_length = 1000;
  const absl::Status status = CorpusSampler::Create(corpus, options).status();
  EXPECT_THAT(status.message(), HasSubstr("sampler_short.i32' has 1000 tokens, too few for one "
                                          "row of sequence length 1000"));
}

TEST(Sampler, HeldOutPartStartsAtADocumentWhenItCanAndIsDisjoint) {
  auto corpus = OffsetCorpus("sampler_held_out", 1001, {0, 300, 301, 950, 1001});
  // 10%: the last 101 tokens start at 900, inside [301, 950); moved to 950, 51 tokens are left:
  // at least half of them.
  EXPECT_EQ(HeldOutStart(*corpus, 0.1), 950);
  // 20%: 201 tokens from 800; moving to 950 would leave fewer than half: split inside it.
  EXPECT_EQ(HeldOutStart(*corpus, 0.2), 800);
  // With whole documents (packed samples) it moves back to that document's start instead.
  EXPECT_EQ(HeldOutStart(*corpus, 0.2, /*whole_documents=*/true), 301);
  EXPECT_EQ(HeldOutStart(*corpus, 0.1, /*whole_documents=*/true), 950);
  EXPECT_EQ(HeldOutStart(*corpus, 0.7), 300);  // 701 tokens from 300: a document start already
  EXPECT_EQ(HeldOutStart(*corpus, 0.0), 1001);
  EXPECT_EQ(HeldOutStart(*OffsetCorpus("sampler_held_out_one", 1001, {0, 1001}), 0.1), 900);

  // The two parts' samplers: every token of a training row (inputs and labels) lies before the
  // split, every held-out one after it; each part's rows are its own.
  for (const int64_t split : {int64_t{950}, int64_t{800}}) {
    SamplerOptions train = kOptions, held_out = kOptions;
    train.stream_end = split;
    held_out.stream_begin = split;
    auto train_sampler = MakeSampler(corpus, train);
    auto held_out_sampler = MakeSampler(corpus, held_out);
    EXPECT_EQ(train_sampler->num_rows(), (split - 1) / 10);
    EXPECT_EQ(held_out_sampler->num_rows(), (1001 - split - 1) / 10);
    for (int64_t step = 0; step < 30; ++step) {
      absl::StatusOr<Batch> batch = train_sampler->BatchAt({.step = step});
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const int32_t token : Values(batch->labels)) EXPECT_LT(token, split);
      batch = held_out_sampler->BatchAt({.step = step});
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const int32_t token : Values(batch->tokens)) EXPECT_GE(token, split);
    }
  }
  // A part too short for one row names the stretch.
  SamplerOptions tail = kOptions;
  tail.stream_begin = 995;
  EXPECT_THAT(CorpusSampler::Create(corpus, tail).status().message(),
              HasSubstr("sampler_held_out.i32' (tokens [995, 1001) of it) has 6 tokens, too few"));
}

TEST(Sampler, TokenOutsideTheVocabularyNamesWhereItIs) {
  auto corpus = OffsetCorpus("sampler_vocab", 1001, {0, 300, 1001});
  SamplerOptions options = kOptions;
  options.vocab_size = 500;
  auto sampler = MakeSampler(corpus, options);
  EXPECT_TRUE(sampler->ReadRows({{48}}).ok());                     // tokens 480..490
  const absl::Status status = sampler->ReadRows({{49}}).status();  // 490..500: its last label
  EXPECT_THAT(status.message(),
              HasSubstr("sampler_vocab.i32': document 1, position 200 holds token id 500, "
                        "outside the vocabulary [0, 500)"));
}

TEST(Sampler, BadOptions) {
  auto corpus = OffsetCorpus("sampler_options", 100, {0, 100});
  SamplerOptions options = kOptions;
  options.sequence_length = 0;
  EXPECT_THAT(CorpusSampler::Create(corpus, options).status().message(),
              HasSubstr("sequence length 0 must be in [1, 2^31 - 1)"));
  options = kOptions;
  options.micro_batch_size = -2;
  EXPECT_THAT(CorpusSampler::Create(corpus, options).status().message(),
              HasSubstr("micro-batch size -2 must be positive"));
  options = kOptions;
  options.vocab_size = 0;
  EXPECT_THAT(CorpusSampler::Create(corpus, options).status().message(),
              HasSubstr("vocab size 0 must be in [1, 2^31]"));
}

}  // namespace
}  // namespace kelvin::data
