// Sample-length summaries: nearest-rank percentiles, and at each power-of-two row length from the
// median up to the longest sample the samples and tokens a row of that length cuts off.
#include "data/sft/length_summary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kelvin::data {
namespace {

TEST(LengthSummary, PercentilesAndWhatEachRowLengthCuts) {
  // 10 samples: 1..9 and one of 40 tokens.
  const LengthSummary s = SummarizeLengths({40, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_EQ(s.samples, 10);
  EXPECT_EQ(s.total_tokens, 85);
  EXPECT_EQ(s.median, 5);  // the 5th smallest
  EXPECT_EQ(s.p90, 9);     // the 9th
  EXPECT_EQ(s.p99, 40);    // the 10th
  EXPECT_EQ(s.longest, 40);
  ASSERT_EQ(s.cuts.size(), 4u);  // 8, 16, 32, 64
  EXPECT_EQ(s.cuts[0].seq_length, 8);
  EXPECT_EQ(s.cuts[0].samples, 2);  // 9 and 40
  EXPECT_EQ(s.cuts[0].tokens, 1 + 32);
  EXPECT_EQ(s.cuts[1].seq_length, 16);
  EXPECT_EQ(s.cuts[1].tokens, 24);
  EXPECT_EQ(s.cuts[2].tokens, 8);
  EXPECT_EQ(s.cuts[3].seq_length, 64);
  EXPECT_EQ(s.cuts[3].samples, 0);
  EXPECT_EQ(FormatLengthSummary(s),
            "sample lengths: median 5, p90 9, p99 40, longest 40 tokens; longer than 8: 2 samples "
            "(20.0%; 38.8% of the tokens cut off), 16: 1 samples (10.0%; 28.2% of the tokens cut "
            "off), 32: 1 samples (10.0%; 9.4% of the tokens cut off), 64: none");
}

TEST(LengthSummary, OneSampleOfAPowerOfTwoNeedsOneRowLength) {
  const LengthSummary s = SummarizeLengths({4});
  EXPECT_EQ(s.median, 4);
  ASSERT_EQ(s.cuts.size(), 1u);
  EXPECT_EQ(s.cuts[0].seq_length, 4);
  EXPECT_EQ(s.cuts[0].samples, 0);
}

}  // namespace
}  // namespace kelvin::data
