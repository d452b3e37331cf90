// Learning-rate schedules: linear warmup, then constant, cosine, linear or warmup-stable-decay.
#include "training/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kelvin::training {

double LearningRateAt(const config::LrScheduleConfig& schedule, double base_lr, int64_t total_steps,
                      int64_t step) {
  const int64_t warmup = schedule.warmup_steps();
  if (step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (schedule.type() == config::LrScheduleConfig::CONSTANT) return base_lr;
  const int64_t decay_end = schedule.has_decay_steps() ? schedule.decay_steps() : total_steps;
  // The decay runs over [decay_begin, decay_end): all of it after the warmup, or the cooldown.
  const int64_t decay_begin = schedule.type() == config::LrScheduleConfig::WARMUP_STABLE_DECAY
                                  ? decay_end - schedule.cooldown_steps()
                                  : warmup;
  const double min_lr = base_lr * schedule.min_lr_ratio();
  const double span = static_cast<double>(std::max<int64_t>(decay_end - decay_begin, 1));
  const double progress = std::clamp(static_cast<double>(step - decay_begin) / span, 0.0, 1.0);
  if (schedule.type() == config::LrScheduleConfig::COSINE) {
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return base_lr + (min_lr - base_lr) * progress;  // LINEAR, WARMUP_STABLE_DECAY
}

}  // namespace kelvin::training
