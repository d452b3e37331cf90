// A non-finite gradient norm stops the run before the update (see gradient_check.h).
#include "training/gradient_check.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/ops/grad_norm.h"

namespace kelvin::training {

absl::Status CheckGradientsFinite(const Context& ctx, const ParameterSet& params, int64_t step,
                                  double loss, double grad_norm, double lr) {
  if (std::isfinite(grad_norm)) return absl::OkStatus();
  constexpr size_t kNamed = 5;
  std::vector<std::string> named;
  int64_t non_finite = 0;
  for (const ParameterSet::Entry& e : params.entries()) {
    if (!e.trainable || std::isfinite(ops::SumOfSquares(ctx, e.grad))) continue;
    if (named.size() < kNamed) named.push_back(e.name);
    ++non_finite;
  }
  const std::string where =
      non_finite == 0
          ? std::string(
                "none of this rank's parameters has them (another pipeline stage or "
                "data-parallel replica holds them)")
          : absl::StrCat(
                "non-finite gradients on this rank in ", absl::StrJoin(named, ", "),
                non_finite > static_cast<int64_t>(kNamed)
                    ? absl::StrCat(" and ", non_finite - static_cast<int64_t>(kNamed), " more")
                    : "",
                " (of ", params.entries().size(), " parameters)");
  return absl::InternalError(absl::StrFormat(
      "the gradient norm became %g at step %d although the loss (%.4f) was finite: %s. No update "
      "was applied and no checkpoint of this step is written; lower optimizer.lr (now %g) or raise "
      "lr_schedule.warmup_steps, or look at this step's batches, then run the job again (it "
      "resumes from its last checkpoint)",
      grad_norm, step, loss, where, lr));
}

}  // namespace kelvin::training
