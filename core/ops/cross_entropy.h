// Fused softmax cross-entropy over the vocabulary (the LM loss): per-token loss, its gradient with
// respect to the logits written in place, and the Hugging Face mean over non-ignored tokens.
// N tokens, V vocabulary. CPU: f32, f64. CUDA: f32, bf16.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// Targets equal to this contribute no loss and no gradient (PyTorch's ignore_index).
inline constexpr int32_t kIgnoreIndex = -100;
// Logits per row that the CPU kernel keeps hot in L1 for its max and sum-exp passes.
inline constexpr int64_t kVocabChunk = 2048;
// Rows stream through cache with an online max / sum-exp (the CPU in chunks of kVocabChunk, each
// CUDA thread over its strided share), so probabilities are never stored. Statistics are f32 (f64
// for f64 logits) whatever the logits dtype, as Hugging Face upcasts logits to f32.

// logits [N, V], targets [N] i32 -> loss [N] (AccumDType: -log softmax(logits)[target], 0 where
// the target is kIgnoreIndex), lse [N] (AccumDType: log-sum-exp of each row, saved for backward).
// A target outside [0, V) other than kIgnoreIndex is a programmer error: the CPU aborts on it; the
// CUDA kernels cannot report it and treat the row as ignored (loss 0, gradient 0).
void CrossEntropyForward(const Context& ctx, const Tensor& logits, const Tensor& targets,
                         Tensor& loss, Tensor& lse);

// In place: logits [N, V] <- grad_scale * (softmax(logits) - onehot(target)) per row, using
// lse [N] from CrossEntropyForward; ignored rows become 0. grad_scale is d(total)/d(loss_t), e.g.
// 1 / (number of non-ignored tokens in the global batch).
void CrossEntropyBackward(const Context& ctx, Tensor& logits, const Tensor& targets,
                          const Tensor& lse, double grad_scale);

// Forward and backward fused per row (the row is read twice while it is still in cache): writes
// loss [N] (AccumDType) and replaces logits [N, V] by the gradient of grad_scale * sum_t loss_t.
void SoftmaxCrossEntropy(const Context& ctx, Tensor& logits, const Tensor& targets,
                         double grad_scale, Tensor& loss);

// The number of targets [N] i32 != kIgnoreIndex (host or device tensor; a device tensor is copied
// to the host, which synchronises the stream).
int64_t CountNonIgnored(const Context& ctx, const Tensor& targets);

// The Hugging Face loss: returns the mean loss over non-ignored tokens (host double, summed in f64
// in token order; synchronises CUDA) and leaves the gradient of that mean in logits [N, V]. With
// no non-ignored token: returns 0 and zeroes logits. Not for data parallelism, where grad_scale
// must count the global batch: use SoftmaxCrossEntropy there.
double SoftmaxCrossEntropyMean(const Context& ctx, Tensor& logits, const Tensor& targets);

// Backends behind the dispatchers above (arguments already checked).
namespace cpu {
void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse);
void CrossEntropyBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                          double grad_scale);
void SoftmaxCrossEntropy(Tensor& logits, const Tensor& targets, double grad_scale, Tensor& loss);
}  // namespace cpu
namespace cuda {
void CrossEntropyForward(const Context& ctx, const Tensor& logits, const Tensor& targets,
                         Tensor& loss, Tensor& lse);
void CrossEntropyBackward(const Context& ctx, Tensor& logits, const Tensor& targets,
                          const Tensor& lse, double grad_scale);
void SoftmaxCrossEntropy(const Context& ctx, Tensor& logits, const Tensor& targets,
                         double grad_scale, Tensor& loss);
}  // namespace cuda

}  // namespace kelvin::ops
