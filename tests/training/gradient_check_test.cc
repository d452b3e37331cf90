// A non-finite gradient norm is an error naming the parameters whose gradients are not finite
// (NaN or infinite, at most 5 by name), or saying that another rank holds them; a finite norm
// passes.
#include "training/gradient_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace kelvin::training {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ParameterSet Parameters(int count) {
  ParameterSet params;
  for (int i = 0; i < count; ++i)
    params.Declare(absl::StrCat("layers.", i, ".w"), {3, 2}, ParamGroup::kDecay);
  params.Allocate(DType::kF32);
  return params;
}

TEST(CheckGradientsFinite, AFiniteNormPasses) {
  ParameterSet params = Parameters(2);
  EXPECT_TRUE(CheckGradientsFinite(Context::Cpu(), params, 4, 2.5, 0.75, 1e-4).ok());
}

TEST(CheckGradientsFinite, NamesTheParametersWithNonFiniteGradients) {
  ParameterSet params = Parameters(8);
  params.grad("layers.1.w").data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  params.grad("layers.6.w").data<float>()[0] = std::numeric_limits<float>::infinity();
  const absl::Status status =
      CheckGradientsFinite(Context::Cpu(), params, 12, 2.3456, std::nan(""), 3e-4);
  EXPECT_THAT(status.message(),
              HasSubstr("the gradient norm became nan at step 12 although the loss (2.3456) was "
                        "finite: non-finite gradients on this rank in layers.1.w, layers.6.w (of "
                        "8 parameters). No update was applied"));
  EXPECT_THAT(status.message(), HasSubstr("lower optimizer.lr (now 0.0003)"));
  for (int i = 0; i < 8; ++i) {
    params.grad(absl::StrCat("layers.", i, ".w")).data<float>()[1] = -INFINITY;
  }
  const std::string many(
      CheckGradientsFinite(Context::Cpu(), params, 12, 2.3, INFINITY, 3e-4).message());
  EXPECT_THAT(many, HasSubstr("became inf at step 12"));
  EXPECT_THAT(many, HasSubstr("layers.0.w, layers.1.w, layers.2.w, layers.3.w, layers.4.w and 3 "
                              "more (of 8 parameters)"));
  EXPECT_THAT(many, Not(HasSubstr("layers.5.w")));
}

TEST(CheckGradientsFinite, SaysWhenAnotherRankHoldsThem) {
  ParameterSet params = Parameters(2);
  EXPECT_THAT(CheckGradientsFinite(Context::Cpu(), params, 0, 1.0, std::nan(""), 1e-3).message(),
              HasSubstr("none of this rank's parameters has them (another pipeline stage or "
                        "data-parallel replica holds them)"));
}

}  // namespace
}  // namespace kelvin::training
