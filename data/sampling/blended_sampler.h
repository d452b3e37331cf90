// BlendedSampler: a weighted mix of corpus samplers, in the order of Megatron-LM's BlendedDataset
// (its build_blending_indices): deterministic, and every corpus stays within one sample of its
// share at every global sample.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/sampling/batch.h"
#include "data/sampling/row_sampler.h"

namespace kelvin::data {

class BlendedSampler : public BatchSource {
 public:
  // Corpus samplers (stream rows or packed documents) of one micro-batch size and sequence length;
  // weights > 0, one per corpus.
  static absl::StatusOr<std::unique_ptr<BlendedSampler>> Create(
      std::vector<std::unique_ptr<RowSampler>> corpora, std::vector<double> weights);

  int64_t micro_batch_size() const override { return corpora_.front()->micro_batch_size(); }
  int64_t sequence_length() const override { return corpora_.front()->sequence_length(); }
  // The B rows of global samples FirstGlobalSample(where, B) + [0, B) (batch.sources: each row's
  // index in its own corpus).
  absl::StatusOr<Batch> BatchAt(const BatchCoordinates& where) override;

  // Every row of every corpus, the corpora one after another (see batch.h).
  std::optional<int64_t> FixedRowCount() const override;
  absl::StatusOr<Batch> FixedRowsAt(int64_t first) override;

  struct Assignment {
    int corpus = 0;
    int64_t sample = 0;  // the corpus's own sample index
  };
  // Where global sample g comes from: the corpus j that maximises w_j max(g, 1) - n_j(g), n_j(g)
  // being the samples corpus j got before g (weights normalised to sum 1, ties to the lower j), and
  // within corpus j its n_j(g)-th sample (each corpus shuffles its own rows per epoch). Random
  // access: the counts are kept every kBlock samples and the assignments of one block at a time are
  // recomputed from them. Not thread-safe (the current block is cached).
  Assignment AssignmentOf(int64_t global_sample);

 private:
  static constexpr int64_t kBlock = 4096;

  BlendedSampler(std::vector<std::unique_ptr<RowSampler>> corpora, std::vector<double> weights);
  // The assignments of samples [block * kBlock, (block + 1) * kBlock) into block_.
  void ComputeBlock(int64_t block);

  std::vector<std::unique_ptr<RowSampler>> corpora_;
  std::vector<double> weights_;  // [J], summing to 1
  // counts_at_block_[k][j]: samples corpus j got before sample k * kBlock ([blocks computed + 1]).
  std::vector<std::vector<int64_t>> counts_at_block_;
  int64_t cached_block_ = -1;
  std::vector<Assignment> block_;  // [kBlock] assignments of cached_block_
};

}  // namespace kelvin::data
