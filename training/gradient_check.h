// The check between a step's backward and its update: a gradient norm that is not finite (an
// overflow or a NaN in backward although the loss was finite) stops the run before the optimizer
// applies it, so that neither the weights nor any checkpoint take the corrupted update; the error
// names the parameters whose gradients are not finite on this rank.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/optim/parameter_set.h"
#include "core/status.h"

namespace kelvin::training {

// OK when grad_norm is finite; otherwise an error naming the step (`step`: 1-based, as the
// progress lines count), loss, lr (`lr` the optimizer's base rate, for the advice) and up to 5 of
// `params`'s entries whose gradients are not finite.
absl::Status CheckGradientsFinite(const Context& ctx, const ParameterSet& params, int64_t step,
                                  double loss, double grad_norm, double lr);

}  // namespace kelvin::training
