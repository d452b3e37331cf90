// The rules of the SSA flags: what every caller that takes SSA options from a user checks.
#include "ssa/ssa_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kelvin::ssa {
namespace {

const char* Flag(bool on) { return on ? "true" : "false"; }

}  // namespace

std::vector<std::string> SsaOptionsProblems(const SsaOptions& options, const std::string& where) {
  std::vector<std::string> problems;
  if (!std::isfinite(options.alpha_init)) {
    problems.push_back(absl::StrCat(
        where, ".alpha_init=", options.alpha_init,
        ": must be a finite number; give the initial alpha, e.g. -8 (sigma(-8) = 3.35e-4)"));
  }
  if (options.temperature_clamp.has_value()) {
    const TemperatureClamp& clamp = *options.temperature_clamp;
    if (!std::isfinite(clamp.lo) || !std::isfinite(clamp.hi) || clamp.lo <= 0 ||
        clamp.lo >= clamp.hi) {
      problems.push_back(absl::StrCat(where, ".temperature_clamp=[", clamp.lo, ", ", clamp.hi,
                                      "]: not an interval of positive temperatures; need finite "
                                      "0 < lo < hi (e.g. lo 0.9, hi 1.1), or no clamp"));
    }
  }
  if (!std::isfinite(options.temperature_lr_scale) || options.temperature_lr_scale < 0) {
    problems.push_back(absl::StrCat(
        where, ".temperature_lr_scale=", options.temperature_lr_scale,
        ": must be a finite number >= 0 (1: the base learning rate; 0 freezes a^q, a^v, alpha)"));
  }
  const bool query_varies =
      options.query_temperature && (options.token_aware || options.position_aware);
  const bool value_varies = options.value_temperature && options.token_aware;
  if (!query_varies && !value_varies) {
    problems.push_back(absl::StrCat(
        where, ": query_temperature=", Flag(options.query_temperature), " value_temperature=",
        Flag(options.value_temperature), " token_aware=", Flag(options.token_aware),
        " position_aware=", Flag(options.position_aware),
        " keep every temperature at 1 (vanilla attention); turn a temperature on, or turn SSA "
        "off"));
  }
  return problems;
}

absl::Status ValidateSsaOptions(const SsaOptions& options, const std::string& where) {
  const std::vector<std::string> problems = SsaOptionsProblems(options, where);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

}  // namespace kelvin::ssa
