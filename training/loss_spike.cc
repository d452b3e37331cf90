// The loss-spike rule: the window of recent losses, the verdicts and their messages.
#include "training/loss_spike.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kelvin::training {

LossSpikeRule::LossSpikeRule(const config::LossSpikeConfig& config) : config_(config) {}

LossSpikeRule::Judgement LossSpikeRule::Judge(double loss) {
  Judgement judgement;
  if (!recent_.empty()) {  // summed oldest first: the same bits after a resume
    judgement.reference =
        std::accumulate(recent_.begin(), recent_.end(), 0.0) / static_cast<double>(recent_.size());
  }
  const bool spike = config_.action() != config::LossSpikeConfig::OFF && !recent_.empty() &&
                     loss > config_.factor() * judgement.reference && loss > config_.min_loss();
  if (!spike) {
    recent_.push_back(loss);
    while (static_cast<int64_t>(recent_.size()) > config_.window()) recent_.pop_front();
    skips_in_a_row_ = 0;
    return judgement;
  }
  if (config_.action() == config::LossSpikeConfig::SKIP_STEP &&
      skips_in_a_row_ < config_.max_skips()) {
    ++skipped_steps_;
    ++skips_in_a_row_;
    judgement.verdict = Verdict::kSkip;
    return judgement;
  }
  judgement.verdict = Verdict::kStop;
  return judgement;
}

absl::Status LossSpikeRule::StopError(int64_t step, double loss, const Judgement& judgement,
                                      double lr, const std::string& resume_advice) const {
  const std::string skips =
      config_.action() == config::LossSpikeConfig::SKIP_STEP
          ? absl::StrFormat(" after %d step(s) skipped in a row (training.loss_spike.max_skips=%d)",
                            skips_in_a_row_, config_.max_skips())
          : "";
  return absl::AbortedError(absl::StrFormat(
      "training.loss_spike: the loss of step %d is %.6g, more than factor=%g times the mean "
      "%.6g of the last %d step(s) kept%s: training diverged (or a batch is broken); the update "
      "was not applied and no checkpoint of this state is saved. Lower optimizer.lr (now %g) or "
      "raise lr_schedule.warmup_steps, and %s; or set training.loss_spike.action=SKIP_STEP to "
      "skip such steps",
      step, loss, config_.factor(), judgement.reference, recent_.size(), skips, lr, resume_advice));
}

std::string LossSpikeRule::SkipWarning(int64_t step, double loss,
                                       const Judgement& judgement) const {
  return absl::StrFormat(
      "training.loss_spike: SKIPPING step %d: its loss %.6g is more than factor=%g times the mean "
      "%.6g of the last %d step(s) kept; its update is discarded (%d skipped in a row, at most "
      "max_skips=%d; %d in the run)",
      step, loss, config_.factor(), judgement.reference, recent_.size(), skips_in_a_row_,
      config_.max_skips(), skipped_steps_);
}

LossSpikeRecord LossSpikeRule::Record() const {
  return {std::vector<double>(recent_.begin(), recent_.end()), skipped_steps_, skips_in_a_row_};
}

void LossSpikeRule::Restore(const LossSpikeRecord& record) {
  recent_.assign(record.recent_losses.begin(), record.recent_losses.end());
  while (static_cast<int64_t>(recent_.size()) > config_.window()) recent_.pop_front();
  skipped_steps_ = record.skipped_steps;
  skips_in_a_row_ = record.skips_in_a_row;
}

}  // namespace kelvin::training
