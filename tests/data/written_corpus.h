// A corpus for the data tests, written with MegatronDatasetWriter: documents of given lengths
// whose tokens count up through the stream, and optionally their loss mask.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/corpus/megatron_dataset_writer.h"
#include "data/corpus/mmap_indexed_dataset.h"

namespace kelvin::data {

// A Megatron dataset (in the test temp directory, named after `name`) of documents with the given
// lengths; the token at stream offset i is i + 1 (so a token tells where it came from). With
// `mask_of`, the corpus carries a loss mask: mask_of(stream offset) says which tokens are targets.
inline std::shared_ptr<const TokenCorpus> WrittenCorpus(const std::string& name,
                                                        const std::vector<int64_t>& lengths,
                                                        bool (*mask_of)(int64_t) = nullptr) {
  const std::string prefix = ::testing::TempDir() + "/written_corpus_" + name;
  absl::StatusOr<MegatronDatasetWriter> tokens =
      MegatronDatasetWriter::Create(prefix, TokenType::kInt32);
  absl::StatusOr<MegatronDatasetWriter> mask =
      MegatronDatasetWriter::Create(prefix + "_mask", TokenType::kUInt8);
  EXPECT_TRUE(tokens.ok() && mask.ok());
  int64_t next = 0;
  for (const int64_t length : lengths) {
    std::vector<int64_t> document(length), targets(length);  // [length]
    for (int64_t t = 0; t < length; ++t, ++next) {
      document[t] = next + 1;
      targets[t] = mask_of != nullptr && mask_of(next) ? 1 : 0;
    }
    EXPECT_TRUE(tokens->AddSequence(document).ok());
    EXPECT_TRUE(mask->AddSequence(targets).ok());
    tokens->EndDocument();
    mask->EndDocument();
  }
  EXPECT_TRUE(tokens->Finish().ok() && tokens->Commit().ok());
  EXPECT_TRUE(mask->Finish().ok() && mask->Commit().ok());
  absl::StatusOr<TokenCorpus> corpus = OpenMegatronDataset(prefix);
  KELVIN_CHECK(corpus.ok()) << corpus.status();  // setup, not what is tested
  if (mask_of != nullptr) {
    absl::StatusOr<TokenCorpus> opened_mask = OpenMegatronDataset(prefix + "_mask");
    KELVIN_CHECK(opened_mask.ok()) << opened_mask.status();
    EXPECT_TRUE(corpus->AttachLossMask(std::move(*opened_mask)).ok());
  }
  return std::make_shared<const TokenCorpus>(std::move(*corpus));
}

}  // namespace kelvin::data
