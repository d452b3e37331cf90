// The "did you mean" helpers: distances, the one plausible name, the nearest list.
#include "core/strings/did_you_mean.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kelvin::strings {
namespace {

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutionsIgnoringCase) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("Steps", "steps"), 0);
  EXPECT_EQ(EditDistance("flaw", "lawn"), 2);
}

TEST(ClosestName, SuggestsTyposAndPrefixesOnly) {
  const std::vector<std::string> fields = {"steps", "micro_batch_size", "seq_length", "device"};
  EXPECT_EQ(ClosestName("step", fields), "steps");
  EXPECT_EQ(ClosestName("micro_batch", fields), "micro_batch_size");
  EXPECT_EQ(ClosestName("seqlength", fields), "seq_length");
  EXPECT_EQ(ClosestName("DEVICE", fields), "device");
  EXPECT_EQ(ClosestName("learning_rate", fields), "");
  EXPECT_EQ(ClosestName("x", fields), "");
}

TEST(NearestNames, ListsTheNearestFirstAndAtMostCount) {
  const std::vector<std::string> names = {"model.norm.weight", "lm_head.weight",
                                          "model.embed_tokens.weight", "model.norm.bias"};
  EXPECT_THAT(NearestNames("model.norm.weigth", names, 2),
              ::testing::ElementsAre("model.norm.weight", "model.norm.bias"));
  EXPECT_EQ(NearestNames("x", names, 10).size(), 4u);
  EXPECT_TRUE(NearestNames("x", {}, 3).empty());
}

}  // namespace
}  // namespace kelvin::strings
