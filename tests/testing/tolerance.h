// The project's tolerances, in one place (docs/design.md). Norm-wise relative errors
// ||actual - expected|| / ||expected|| against the f64 reference.
#pragma once

#include "core/dtype.h"

namespace kelvin::testing {

inline constexpr double kF64RelTol = 1e-12;
inline constexpr double kF32RelTol = 1e-5;
inline constexpr double kBF16RelTol = 2e-2;
// Central finite differences in f64 (step kFiniteDifferenceStep) against an analytic gradient.
inline constexpr double kFiniteDifferenceStep = 1e-6;
inline constexpr double kFiniteDifferenceRelTol = 1e-6;
// A low-precision fused kernel may have at most this multiple of the error of the naive
// same-precision computation against the f64 reference.
inline constexpr double kLowPrecisionErrorRatio = 2.0;
// A closed form evaluated in double (the LR schedules), absolute.
inline constexpr double kClosedFormAbsTol = 1e-12;
// An f64 model's loss or log-probability of one token (or a window's mean) by two paths (the
// KV-cache decoder against a full forward, a batch against a prompt alone): the same terms in
// another order, absolute; and a sum of about 20 of them.
inline constexpr double kF64PathLossAbsTol = 1e-12;
inline constexpr double kF64PathLossSumAbsTol = 1e-11;

// Whole models, where one op's error compounds over the layers and the long reductions.
// Central finite differences of a whole f64 model's loss (a sum over every token, through every
// layer) at sampled parameter elements: a larger step than one op's, for a loss whose rounding
// (about 1e-16 of its sum, divided by the step) is larger; within abs + rel |numerical|.
inline constexpr double kF64ModelFiniteDifferenceStep = 1e-5;
inline constexpr double kF64ModelFiniteDifferenceAbsTol = 1e-7;
inline constexpr double kF64ModelFiniteDifferenceRelTol = 1e-5;
// A layout's per-layer temperature statistics (mean, std, min, max of tau) against one process's:
// each rank's summaries merged, the counts, means and second moments combined in another order;
// within rel |expected| + abs.
inline constexpr double kMergedTemperatureRelTol = 1e-4;
inline constexpr double kMergedTemperatureAbsTol = 1e-6;
// f64 results reduced over ranks (gradients summed, reduce-scattered) against one process: the
// same terms added in another order, over more terms than one op.
inline constexpr double kF64ReducedRelTol = 1e-10;
// The gradient norm of an f32 training step reduced over ranks against one process: the square
// root of a sum over every parameter, each gradient itself reduced in another order.
inline constexpr double kF32ReducedGradNormRelTol = 1e-4;
// Parameters that start at zero (LoRA's B) after a few f32 AdamW steps under a parallel layout
// against one process: such a tensor is nothing but its updates, each m / sqrt(v) of gradients
// summed in another order, and where a coordinate's steps nearly cancel that rounding is most of
// what is left (measured 2.6e-5 at 3 steps): 10x kF32RelTol.
inline constexpr double kF32AdamFromZeroRelTol = 1e-4;
// Kelvin's f32 gradients against PyTorch's f32 autograd (the HF parity fixtures): the backward
// adds over every token and through every layer in another order, 10x kF32RelTol.
inline constexpr double kF32ModelGradRelTol = 1e-4;
// A bf16 model (f32 masters, f32 gradients) against the same weights in f32 on the CPU: bf16
// rounding of every activation (kBF16RelTol per op) compounds over the layers.
inline constexpr double kBf16ModelLogitsRelTol = 3e-2;
inline constexpr double kBf16ModelLossRelTol = 1e-2;
inline constexpr double kBf16ModelGradRelTol = 6e-2;
inline constexpr double kBf16ModelTemperatureAbsTol = 1e-2;  // per-layer means of tau
// A few steps of bf16 training on CUDA against the same job in f32 on the CPU: the rounding of
// each step also changes the next one's weights. The SSA read-outs start at zero, so theirs is the
// relative error of a few Adam steps of about lr each, whose sign near bf16's noise may flip (H200,
// 2026-11-30: 0.057-0.111; the other weights under 0.03).
inline constexpr double kBf16TrainingLossRelTol = 2e-2;
inline constexpr double kBf16TrainingGradNormRelTol = 1e-1;
inline constexpr double kBf16TrainingTemperatureAbsTol = 2e-3;  // per-layer mean and std of tau
inline constexpr double kBf16TrainedWeightRelTol = 3e-2;
inline constexpr double kBf16TrainedReadoutRelTol = 0.15;

inline double RelTolerance(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return kF64RelTol;
    case DType::kBF16:
      return kBF16RelTol;
    default:
      return kF32RelTol;
  }
}

}  // namespace kelvin::testing
