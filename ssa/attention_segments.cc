// Cutting an SSA attention call into cuDNN's ragged segments (ssa/attention_segments.h).
#include "ssa/attention_segments.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace kelvin::ssa {

bool AttentionSegments::square() const {
  for (int64_t s = 0; s < count(); ++s) {
    if (query_lengths[s] != key_lengths[s]) return false;
  }
  return true;
}

int64_t AttentionSegments::uncovered_keys(int64_t key_tokens) const {
  int64_t covered = 0;
  for (const int32_t length : key_lengths) covered += length;
  return key_tokens - covered;
}

absl::StatusOr<AttentionSegments> SegmentDocuments(const SsaBlockShape& shape,
                                                   const int32_t* query_positions,
                                                   const int32_t* key_positions) {
  const int64_t qb = shape.query_begin, qc = shape.query_count;
  const int64_t kb = shape.key_begin, kc = shape.key_count;
  AttentionSegments segments;
  for (int64_t row = 0; row < shape.batch; ++row) {
    const int32_t* qp = query_positions + row * qc;  // [Tq]
    const int32_t* kp = key_positions + row * kc;    // [Tk]
    int64_t a = 0;
    while (a < qc) {
      // One document's run of queries: global indices [first, end), document start `start`.
      const int64_t first = qb + a, start = first - qp[a];
      KELVIN_CHECK(qp[a] >= 0 && start >= 0)
          << "ssa_attention: query position " << qp[a] << " at global index " << first << " of row "
          << row << " starts its document before the row";
      int64_t next = a + 1;
      while (next < qc && qp[next] == qp[a] + (next - a)) ++next;
      KELVIN_CHECK(next == qc || qp[next] == 0)
          << "ssa_attention: query position " << qp[next] << " at global index " << qb + next
          << " of row " << row << ": position ids must restart at 0 or count up by one";
      const int64_t end = qb + next;
      if (first < kb) {
        return absl::UnimplementedError(absl::StrCat(
            "queries from global index ", first, " see no key of the call (its keys start at ", kb,
            "), and cuDNN's mask cannot leave a query without keys"));
      }
      if (end > kb + kc) {
        return absl::UnimplementedError(absl::StrCat(
            "the call's keys end at global index ", kb + kc, ", before query ", end - 1,
            " (its own key): the bottom-right causal mask cannot express a key block that stops "
            "short of its queries"));
      }
      const int64_t key_first = std::max(start, kb);
      for (const int64_t j : {key_first, end - 1}) {
        KELVIN_CHECK_EQ(kp[j - kb], j - start)
            << "ssa_attention: the key at global index " << j << " of row " << row
            << " is in the document of query " << first << " (which starts at " << start
            << ") but has position " << kp[j - kb];
      }
      segments.query_starts.push_back(row * qc + a);
      segments.query_lengths.push_back(static_cast<int32_t>(next - a));
      segments.key_starts.push_back(row * kc + key_first - kb);
      segments.key_lengths.push_back(static_cast<int32_t>(end - key_first));
      segments.max_query_length = std::max(segments.max_query_length, next - a);
      segments.max_key_length = std::max(segments.max_key_length, end - key_first);
      a = next;
    }
  }
  return segments;
}

}  // namespace kelvin::ssa
