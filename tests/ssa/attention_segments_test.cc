// Cutting SSA attention calls into cuDNN's ragged segments (ssa/attention_segments.h) on the host:
// whole rows, packed documents, context parallelism's query chunks against key prefixes (uncovered
// keys included), and the ring blocks the bottom-right causal mask cannot express.
#include "ssa/attention_segments.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kelvin::ssa {
namespace {

using Starts = std::vector<int64_t>;
using Lengths = std::vector<int32_t>;

AttentionSegments Segment(const SsaBlockShape& shape, const std::vector<int32_t>& query_positions,
                          const std::vector<int32_t>& key_positions) {
  absl::StatusOr<AttentionSegments> segments =
      SegmentDocuments(shape, query_positions.data(), key_positions.data());
  EXPECT_TRUE(segments.ok()) << segments.status();
  return segments.value_or(AttentionSegments());
}

TEST(AttentionSegments, WholeRowsAreOneSquareSegmentEach) {
  const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};  // [B=2, T=5]
  const AttentionSegments s = Segment(SsaBlockShape::Full(2, 5), positions, positions);
  EXPECT_EQ(s.query_starts, (Starts{0, 5}));
  EXPECT_EQ(s.key_starts, (Starts{0, 5}));
  EXPECT_EQ(s.query_lengths, (Lengths{5, 5}));
  EXPECT_EQ(s.key_lengths, (Lengths{5, 5}));
  EXPECT_EQ(s.max_query_length, 5);
  EXPECT_EQ(s.max_key_length, 5);
  EXPECT_TRUE(s.square());
  EXPECT_EQ(s.uncovered_keys(10), 0);
}

TEST(AttentionSegments, PackedDocumentsAreTheirOwnSegments) {
  // Row 0: documents [0, 3) and [3, 5); row 1: [5, 6), [6, 8), [8, 10).
  const std::vector<int32_t> positions = {0, 1, 2, 0, 1, 0, 0, 1, 0, 1};
  const AttentionSegments s = Segment(SsaBlockShape::Full(2, 5), positions, positions);
  EXPECT_EQ(s.query_starts, (Starts{0, 3, 5, 6, 8}));
  EXPECT_EQ(s.key_starts, (Starts{0, 3, 5, 6, 8}));
  EXPECT_EQ(s.query_lengths, (Lengths{3, 2, 1, 2, 2}));
  EXPECT_EQ(s.key_lengths, (Lengths{3, 2, 1, 2, 2}));
  EXPECT_EQ(s.max_query_length, 3);
  EXPECT_TRUE(s.square());
}

TEST(AttentionSegments, QueryChunkAgainstTheKeyPrefixAlignsToTheLastKey) {
  // One row of 6 tokens, documents [0, 4) and [4, 6); the chunk holds queries [2, 6).
  const std::vector<int32_t> keys = {0, 1, 2, 3, 0, 1};
  const std::vector<int32_t> queries = {2, 3, 0, 1};
  const AttentionSegments s = Segment({1, 2, 4, 0, 6}, queries, keys);
  EXPECT_EQ(s.query_starts, (Starts{0, 2}));
  EXPECT_EQ(s.query_lengths, (Lengths{2, 2}));
  EXPECT_EQ(s.key_starts, (Starts{0, 4}));
  EXPECT_EQ(s.key_lengths, (Lengths{4, 2}));  // queries 2, 3 see keys 0..3
  EXPECT_EQ(s.max_key_length, 4);
  EXPECT_FALSE(s.square());
  EXPECT_EQ(s.uncovered_keys(6), 0);

  // Queries [4, 6) alone: the first document's keys are seen by no query of the call.
  const AttentionSegments late = Segment({1, 4, 2, 0, 6}, {0, 1}, keys);
  EXPECT_EQ(late.key_starts, (Starts{4}));
  EXPECT_EQ(late.key_lengths, (Lengths{2}));
  EXPECT_EQ(late.uncovered_keys(6), 4);
}

TEST(AttentionSegments, AKeyBlockStartingInsideADocumentKeepsItsStart) {
  // Keys [2, 6) of one causal row against queries [3, 6): each query sees keys [2, i].
  const std::vector<int32_t> keys = {2, 3, 4, 5};
  const AttentionSegments s = Segment({1, 3, 3, 2, 4}, {3, 4, 5}, keys);
  EXPECT_EQ(s.query_starts, (Starts{0}));
  EXPECT_EQ(s.key_starts, (Starts{0}));
  EXPECT_EQ(s.key_lengths, (Lengths{4}));
  EXPECT_EQ(s.query_lengths, (Lengths{3}));
}

TEST(AttentionSegments, RingBlocksTheMaskCannotExpressSayWhy) {
  const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5};
  // Keys [0, 3) stop short of queries [3, 6).
  const absl::StatusOr<AttentionSegments> short_keys =
      SegmentDocuments({1, 3, 3, 0, 3}, positions.data() + 3, positions.data());
  EXPECT_EQ(short_keys.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(short_keys.status().message().find("stops short"), std::string::npos)
      << short_keys.status();
  // Queries [0, 3) see none of keys [3, 6).
  const absl::StatusOr<AttentionSegments> no_keys =
      SegmentDocuments({1, 0, 3, 3, 3}, positions.data(), positions.data() + 3);
  EXPECT_EQ(no_keys.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(no_keys.status().message().find("see no key"), std::string::npos) << no_keys.status();
}

}  // namespace
}  // namespace kelvin::ssa
