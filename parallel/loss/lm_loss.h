// The language-model loss of a micro-batch's logits wherever they live (the host or a CUDA
// device, with or without tensor parallelism), for training and for evaluation; on the host the
// vocab-parallel kernels (parallel/loss/vocab_parallel_cross_entropy.h) run on them directly.
#pragma once

#include "core/context.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// logits [N, V] (this rank's vocabulary slice [vocab_begin, vocab_begin + V), on ctx's device),
// labels [N] i32 on the host -> the sum over tokens of the cross-entropy (0 for ignored labels),
// with logits replaced in place by grad_scale * its gradient. On a CUDA device without tensor
// parallelism the fused CUDA cross-entropy runs in place; with tensor parallelism the logits are
// staged through host memory (f32) for the vocab-parallel kernels and the gradient copied back,
// which costs a device round trip of the [N, V/TP] logits per micro-batch (a device vocab-parallel
// kernel is future work).
double SoftmaxCrossEntropySum(const Context& ctx, parallel::Communicator& tp, Tensor& logits,
                              const Tensor& labels, int64_t vocab_begin, double grad_scale);

// Evaluation: the cross-entropy sum as above (logits unchanged) and, when predictions is not
// null, the global argmax of every row into the host tensor predictions [N] i32. Device logits are
// staged through host memory (f32).
double CrossEntropySum(const Context& ctx, parallel::Communicator& tp, const Tensor& logits,
                       const Tensor& labels, int64_t vocab_begin, Tensor* predictions);

// Scoring, token by token: each token's cross-entropy of the logits as above (logits unchanged),
// into a host tensor [N] (f32, f64 for f64 logits; 0 for ignored labels), the same on every rank.
// On a CUDA device without tensor parallelism the fused CUDA cross-entropy runs there and only the
// losses come back (as training's loss runs); otherwise device logits are staged through host
// memory (f32) for the vocab-parallel kernels, as CrossEntropySum stages them.
Tensor CrossEntropyLosses(const Context& ctx, parallel::Communicator& tp, const Tensor& logits,
                          const Tensor& labels, int64_t vocab_begin);

// labels [N] and predictions [N] i32 on the host -> how many labelled tokens (label not
// ops::kIgnoreIndex) were predicted right.
int64_t CountCorrectPredictions(const Tensor& labels, const Tensor& predictions);

}  // namespace kelvin::parallel
