// The evaluation's token accuracy count: labelled tokens predicted right; ignored labels are
// never counted, whatever was predicted there.
#include "parallel/loss/lm_loss.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/ops/cross_entropy.h"

namespace kelvin::parallel {
namespace {

Tensor I32(const std::vector<int32_t>& values) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

TEST(CountCorrectPredictions, CountsLabelledTokensPredictedRight) {
  constexpr int32_t kNo = ops::kIgnoreIndex;
  const Tensor labels = I32({5, 7, kNo, 9, kNo, 3});
  const Tensor predictions = I32({5, 8, 4, 9, kNo, 2});
  EXPECT_EQ(CountCorrectPredictions(labels, predictions), 2);  // tokens 0 and 3
  EXPECT_EQ(CountCorrectPredictions(labels, labels), 4);       // every labelled token
}

}  // namespace
}  // namespace kelvin::parallel
