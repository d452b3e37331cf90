// Learning-rate schedules: linear warmup, then constant, or a cosine, linear or warmup-stable-decay
// descent to a floor.
#pragma once

#include <cstdint>

#include "configs/kelvin.pb.h"

namespace kelvin::training {

// The learning rate of optimizer step `step` (0-based) of `total_steps`, for a resolved config:
// warmup ramps linearly to base_lr over warmup_steps (step 0 gets base_lr / warmup_steps), then
// CONSTANT stays at base_lr; COSINE follows half a cosine and LINEAR a straight line from base_lr
// down to base_lr * min_lr_ratio at decay_steps (default: total_steps), flat afterwards;
// WARMUP_STABLE_DECAY stays at base_lr until decay_steps - cooldown_steps, then falls linearly
// to the floor at decay_steps.
double LearningRateAt(const config::LrScheduleConfig& schedule, double base_lr, int64_t total_steps,
                      int64_t step);

}  // namespace kelvin::training
