// MegatronDatasetWriter: writes a Megatron-LM indexed dataset (the MMIDIDX .idx/.bin pair of
// mmap_indexed_dataset.h) byte for byte as Megatron-Core's IndexedDatasetBuilder does, so that
// Kelvin's and Megatron's tools read each other's corpora.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/status.h"
#include "data/corpus/token_corpus.h"

namespace kelvin::data {

// Sequences stream into the .bin; the .idx is written by Finish. Both are io::AtomicFiles
// (temporaries until Commit renames them), so an interrupted or failed write never leaves a
// dataset that looks complete; datasets that belong together (tokens and loss mask) are committed
// all or none by CommitTogether.
class MegatronDatasetWriter {
 public:
  // Starts `path_prefix`.bin (a temporary until committed) for tokens stored as `type`.
  static absl::StatusOr<MegatronDatasetWriter> Create(const std::string& path_prefix,
                                                      TokenType type);

  // Destroyed uncommitted, it removes its temporaries.
  MegatronDatasetWriter(MegatronDatasetWriter&& other) noexcept = default;
  MegatronDatasetWriter& operator=(MegatronDatasetWriter&&) = delete;

  // Appends one sequence to the current document; a token that does not fit the type is an error
  // naming it (nothing of the sequence is written then).
  absl::Status AddSequence(std::span<const int64_t> tokens);
  // Ends the current document (the sequences added since the previous EndDocument).
  void EndDocument();
  // Writes, fsyncs and closes both files (sequences added after the last EndDocument form a last
  // document), still temporaries.
  absl::Status Finish();
  // Finish, storing the tokens as `stored` rather than the type they were written as: the .bin is
  // rewritten, and a token written that does not fit `stored` is an error naming the range. For a
  // writer that learns the narrowest type only at the end (it writes the wider one first).
  absl::Status FinishAs(TokenType stored);
  // After Finish: renames both files to `path_prefix`.bin / .idx.
  absl::Status Commit();
  // After Finish of each: commits them all or none (io::CommitTogether).
  static absl::Status CommitTogether(const std::vector<MegatronDatasetWriter*>& datasets);

  int64_t num_tokens() const { return num_tokens_; }
  // The largest token added so far (INT64_MIN before any).
  int64_t max_token() const { return max_token_; }

 private:
  MegatronDatasetWriter(std::string path_prefix, TokenType type, io::AtomicFile bin);
  // Rewrites the finished .bin with its tokens stored as `stored`.
  absl::Status RewriteBinAs(TokenType stored);

  std::string path_prefix_;
  TokenType type_;
  io::AtomicFile bin_;
  std::optional<io::AtomicFile> idx_;      // written by Finish
  std::vector<int32_t> sequence_lengths_;  // [S]
  std::vector<int64_t> document_indices_;  // [D]: 0, then the sequence count at each document end
  int64_t num_tokens_ = 0;
  int64_t min_token_ = std::numeric_limits<int64_t>::max();  // of the tokens written so far
  int64_t max_token_ = std::numeric_limits<int64_t>::min();
  bool finished_ = false;
};

}  // namespace kelvin::data
