// SSA option validation: the defaults and the paper's variants pass; each invalid field gives one
// message naming it, its value and what to do.
#include "ssa/ssa_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kelvin::ssa {
namespace {

using ::testing::HasSubstr;

TEST(SsaOptions, DefaultsAndPaperVariantsAreValid) {
  const SsaOptions defaults;
  EXPECT_TRUE(defaults.query_temperature && defaults.value_temperature && defaults.token_aware &&
              defaults.position_aware && defaults.weight_sharing);
  EXPECT_EQ(defaults.alpha_init, -8.0);
  EXPECT_FALSE(defaults.temperature_clamp.has_value());
  EXPECT_EQ(defaults.temperature_lr_scale, 1.0);
  EXPECT_TRUE(ValidateSsaOptions(defaults).ok());

  SsaOptions position_only_query;  // the paper's "position-only query" ablation
  position_only_query.value_temperature = false;
  position_only_query.token_aware = false;
  EXPECT_TRUE(ValidateSsaOptions(position_only_query).ok());
  SsaOptions value_only;
  value_only.query_temperature = false;
  EXPECT_TRUE(ValidateSsaOptions(value_only).ok());
  SsaOptions clamped;
  clamped.temperature_clamp = TemperatureClamp{0.9, 1.1};
  clamped.weight_sharing = false;
  clamped.temperature_lr_scale = 0.0;
  EXPECT_TRUE(ValidateSsaOptions(clamped).ok());
}

TEST(SsaOptions, BadAlphaInit) {
  SsaOptions o;
  o.alpha_init = std::numeric_limits<double>::quiet_NaN();
  const absl::Status status = ValidateSsaOptions(o, "model.ssa");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.ssa.alpha_init=nan: must be a finite number"));
}

TEST(SsaOptions, BadClamp) {
  for (const TemperatureClamp clamp :
       {TemperatureClamp{1.1, 0.9}, TemperatureClamp{1.0, 1.0}, TemperatureClamp{0.0, 1.1},
        TemperatureClamp{-1.0, 1.1}, TemperatureClamp{0.9, INFINITY}}) {
    SsaOptions o;
    o.temperature_clamp = clamp;
    const absl::Status status = ValidateSsaOptions(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("ssa.temperature_clamp=["));
    EXPECT_THAT(status.message(), HasSubstr("need finite 0 < lo < hi"));
  }
  SsaOptions o;
  o.temperature_clamp = TemperatureClamp{1.1, 0.9};
  EXPECT_THAT(ValidateSsaOptions(o).message(), HasSubstr("[1.1, 0.9]"));
}

TEST(SsaOptions, BadLearningRateScale) {
  for (const double scale : {-0.5, std::numeric_limits<double>::infinity()}) {
    SsaOptions o;
    o.temperature_lr_scale = scale;
    const absl::Status status = ValidateSsaOptions(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("ssa.temperature_lr_scale="));
    EXPECT_THAT(status.message(), HasSubstr("must be a finite number >= 0"));
  }
}

TEST(SsaOptions, FlagsThatKeepEveryTemperatureAtOneAreRefused) {
  SsaOptions both_off;
  both_off.query_temperature = both_off.value_temperature = false;
  SsaOptions nothing_varies;  // no token term, no position term: tau^q = tau^v = 1
  nothing_varies.token_aware = nothing_varies.position_aware = false;
  SsaOptions value_without_token;
  value_without_token.query_temperature = false;
  value_without_token.token_aware = false;
  for (const SsaOptions& o : {both_off, nothing_varies, value_without_token}) {
    const absl::Status status = ValidateSsaOptions(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("keep every temperature at 1 (vanilla attention)"));
  }
  SsaOptions everything_wrong = both_off;  // every problem at once, one line each
  everything_wrong.alpha_init = std::numeric_limits<double>::infinity();
  everything_wrong.temperature_lr_scale = -1;
  everything_wrong.temperature_clamp = TemperatureClamp{2, 1};
  EXPECT_EQ(SsaOptionsProblems(everything_wrong, "model.ssa").size(), 4u);
  EXPECT_THAT(ValidateSsaOptions(both_off).message(),
              HasSubstr("ssa: query_temperature=false value_temperature=false token_aware=true "
                        "position_aware=true"));
}

}  // namespace
}  // namespace kelvin::ssa
