// The job's model.architecture.rope_scaling read into the model's RoPE settings: the one reading
// of that message, used by the job validation (its problems) and the job setup (the override).
#pragma once

#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/ops/rope.h"

namespace kelvin::training {

// The RoPE settings the job's rope_scaling gives, on top of `theta` (the source's or the job's
// rope_theta); fields a type does not use stay at their defaults. Every problem (an unknown or
// refused rope_type, a required field missing, a field the type does not use) goes to `problems`,
// one line each under "model.architecture.rope_scaling"; the value rules are
// models::RopeScalingProblems'.
ops::RopeConfig RopeConfigFromJob(const config::RopeScaling& scaling, double theta,
                                  std::vector<std::string>& problems);

}  // namespace kelvin::training
