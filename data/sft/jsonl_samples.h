// Fine-tuning samples from a JSON Lines file into a Megatron indexed dataset PREFIX and its loss
// mask PREFIX_loss_mask: what `kelvin prepare-data` runs (formats: docs/formats.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"
#include "data/corpus/token_corpus.h"
#include "data/sft/length_summary.h"
#include "data/sft/text_sample_encoder.h"

namespace kelvin::data {

struct PreparedSamples {
  std::string tokens_prefix;     // PREFIX
  std::string loss_mask_prefix;  // PREFIX_loss_mask, or empty when no sample has a mask
  TokenType token_type = TokenType::kUInt16;
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t targets = 0;  // tokens that are training targets (all of them without a mask)
  int64_t max_token = 0;
  std::map<std::string, int64_t> ignored_keys;  // key -> lines that had it
  LengthSummary lengths;                        // of the samples, for choosing seq_length
  bool removed_stale_mask = false;  // PREFIX_loss_mask of an earlier run, with no mask now
};

// Each non-blank line becomes one document of PREFIX.bin/.idx (uint16 tokens when every id is below
// 65500, as Megatron-LM chooses, else int32), and its training targets one of
// PREFIX_loss_mask.bin/.idx when any sample has labels or a loss mask; without any mask an earlier
// run's PREFIX_loss_mask is removed. The input is read once, in batches of lines parsed in parallel
// (OpenMP) and written in file order, into temporary files: a bad line is an error naming the
// file, line and field, after which nothing is left (a directory created for the output is removed
// again), and both datasets are written whole before either is renamed into place.
// With `text_encoder`, lines may also be text samples (text_sample_encoder.h), tokenized in the
// same parallel pass.
absl::StatusOr<PreparedSamples> PrepareJsonlSamples(
    const std::string& jsonl_path, const std::string& output_prefix,
    const TextSampleEncoder* text_encoder = nullptr);

// Why `output_prefix` cannot be PrepareJsonlSamples' output prefix (it names no file: empty, a
// directory's trailing '/', "." or ".."), or "" when it can.
std::string OutputPrefixProblem(const std::string& output_prefix);

// What was written, and the data section of a job that trains on it.
std::string DescribePreparedSamples(const PreparedSamples& prepared);

}  // namespace kelvin::data
