// Sample-length percentiles and what each power-of-two row length would cut (see
// length_summary.h).
#include "data/sft/length_summary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/check.h"

namespace kelvin::data {

LengthSummary SummarizeLengths(std::vector<int64_t> lengths) {
  KELVIN_CHECK(!lengths.empty()) << "no sample lengths to summarise";
  std::sort(lengths.begin(), lengths.end());
  const auto n = static_cast<int64_t>(lengths.size());
  const auto percentile = [&](int64_t p) {  // nearest rank: the ceil(p n / 100)-th smallest
    return lengths[static_cast<size_t>(std::max<int64_t>((p * n + 99) / 100, 1) - 1)];
  };
  LengthSummary s;
  s.median = percentile(50);
  s.p90 = percentile(90);
  s.p99 = percentile(99);
  s.longest = lengths.back();
  s.samples = n;
  for (const int64_t length : lengths) s.total_tokens += length;
  int64_t seq_length = 1;
  while (seq_length < s.median) seq_length *= 2;
  for (;; seq_length *= 2) {
    LengthSummary::Cut cut{seq_length, 0, 0};
    for (auto it = std::upper_bound(lengths.begin(), lengths.end(), seq_length);
         it != lengths.end(); ++it) {
      ++cut.samples;
      cut.tokens += *it - seq_length;
    }
    s.cuts.push_back(cut);
    if (seq_length >= s.longest) break;
  }
  return s;
}

std::string FormatLengthSummary(const LengthSummary& s) {
  std::vector<std::string> cuts;
  for (const LengthSummary::Cut& cut : s.cuts) {
    if (cut.samples == 0) {
      cuts.push_back(absl::StrCat(cut.seq_length, ": none"));
      continue;
    }
    cuts.push_back(absl::StrFormat(
        "%d: %d samples (%.1f%%; %.1f%% of the tokens cut off)", cut.seq_length, cut.samples,
        100.0 * static_cast<double>(cut.samples) / static_cast<double>(s.samples),
        100.0 * static_cast<double>(cut.tokens) / static_cast<double>(s.total_tokens)));
  }
  return absl::StrFormat(
      "sample lengths: median %d, p90 %d, p99 %d, longest %d tokens; longer than %s", s.median,
      s.p90, s.p99, s.longest, absl::StrJoin(cuts, ", "));
}

}  // namespace kelvin::data
