// The documents of one SSA attention call as cuDNN's ragged (THD) attention sees them: a segment
// per (row, document) with queries in the call, the run of those queries against the run of keys
// they see, so that a causal mask aligned bottom-right within each segment plus the padding mask
// express SSA's rule "query i sees key j iff i - p_i <= j <= i" (ssa_attention_args.h). Built on
// the host from the position ids; a call that rule cannot be cut into such segments gets why not.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ssa/ssa_attention_args.h"

namespace kelvin::ssa {

// S segments in row order, then document order (so both starts increase).
struct AttentionSegments {
  std::vector<int64_t> query_starts;   // [S] first query's token in the call's query tensor [Nq]
  std::vector<int32_t> query_lengths;  // [S] >= 1
  std::vector<int64_t> key_starts;     // [S] first key's token in the call's key tensor [Nk]
  std::vector<int32_t> key_lengths;    // [S] >= the segment's query length
  int64_t max_query_length = 0;
  int64_t max_key_length = 0;

  int64_t count() const { return static_cast<int64_t>(query_starts.size()); }
  // Every segment's queries are its keys (a full call): top-left and bottom-right alignment agree.
  bool square() const;
  // Keys outside every segment: no query of the call sees them (their gradients are zero).
  int64_t uncovered_keys(int64_t key_tokens) const;
};

// The segments of a call whose position ids follow the operator's rule (restart at 0 or count up
// by one; aborts naming the token where they do not, or where a key's position disagrees with
// its query's document). key_positions: the keys' [B*Tk] ids (the query ids when the keys are the
// queries). Unimplemented, with the reason, when some query sees no key of the call or a key
// block ends before a query's own index (ring blocks; the own kernel runs those).
absl::StatusOr<AttentionSegments> SegmentDocuments(const SsaBlockShape& shape,
                                                   const int32_t* query_positions,
                                                   const int32_t* key_positions);

}  // namespace kelvin::ssa
