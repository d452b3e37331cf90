// The lengths of a dataset's samples summarised for choosing training.seq_length: percentiles,
// and at each power-of-two length from the median up to the longest sample, how many samples are
// longer and how many of their tokens a row of that length cuts off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kelvin::data {

struct LengthSummary {
  int64_t median = 0, p90 = 0, p99 = 0, longest = 0;  // nearest-rank percentiles, in tokens
  int64_t samples = 0, total_tokens = 0;
  struct Cut {
    int64_t seq_length = 0;
    int64_t samples = 0;  // longer than seq_length
    int64_t tokens = 0;   // beyond seq_length, summed over those samples
  };
  std::vector<Cut> cuts;  // seq_length 2^k from >= the median to >= the longest
};

// `lengths`: one per sample, >= 1 each, at least one.
LengthSummary SummarizeLengths(std::vector<int64_t> lengths);

// E.g. "sample lengths: median 212, p90 377, p99 398, longest 400 tokens; longer than 256: 35205
// samples (35.2%; 8.1% of the tokens cut off), 512: none".
std::string FormatLengthSummary(const LengthSummary& summary);

}  // namespace kelvin::data
