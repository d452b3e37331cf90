// The loss-spike rule of training.loss_spike: each step's loss is judged against the mean loss of
// the last `window` steps kept; one more than `factor` times that reference (and than min_loss) is
// a spike, which stops the run (STOP) or has its update discarded (SKIP_STEP, up to max_skips in a
// row). The rule judges the loss every rank agrees on (the global batch's), so every rank decides
// alike; its memory (LossSpikeRecord) goes into each checkpoint.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "training/checkpoint/checkpoint_format.h"

namespace kelvin::training {

class LossSpikeRule {
 public:
  // `config`: training.loss_spike with its defaults filled in (launcher/config/job_config.h).
  explicit LossSpikeRule(const config::LossSpikeConfig& config);

  enum class Verdict {
    kKeep,  // no spike (or the rule is OFF): the update goes ahead
    kSkip,  // a spike SKIP_STEP skips: no update
    kStop,  // a spike that stops the run
  };
  struct Judgement {
    Verdict verdict = Verdict::kKeep;
    double reference = 0;  // the mean of the window it was judged against (0 when empty)
  };
  // Judges a step's (finite) loss and remembers it: a kept step's loss joins the window, a
  // skipped one counts as a skip.
  Judgement Judge(double loss);

  // The message of a spike that stops the run: `step` (1-based) and `loss`, the reference it
  // exceeded, the learning rate `lr` (optimizer.lr) and `resume_advice` (which checkpoint to
  // resume from), for a loss that failed Judge with kStop.
  absl::Status StopError(int64_t step, double loss, const Judgement& judgement, double lr,
                         const std::string& resume_advice) const;
  // The warning of a skipped step.
  std::string SkipWarning(int64_t step, double loss, const Judgement& judgement) const;

  // The memory a checkpoint holds, and its restore (the window cut to this job's).
  LossSpikeRecord Record() const;
  void Restore(const LossSpikeRecord& record);

 private:
  config::LossSpikeConfig config_;
  std::deque<double> recent_;  // the last kept steps' losses, oldest first: [<= window]
  int64_t skipped_steps_ = 0;
  int64_t skips_in_a_row_ = 0;
};

}  // namespace kelvin::training
