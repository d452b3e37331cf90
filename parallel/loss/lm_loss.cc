// The LM loss on the host or a CUDA device (see lm_loss.h).
#include "parallel/loss/lm_loss.h"

#include "core/check.h"
#include "core/copy.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "parallel/loss/vocab_parallel_cross_entropy.h"

namespace kelvin::parallel {
namespace {

// The sum in double of a host f32 or f64 tensor, in index order.
double Sum(const Tensor& host) {
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    sum += host.dtype() == DType::kF64 ? host.data<double>()[i]
                                       : static_cast<double>(host.data<float>()[i]);
  }
  return sum;
}

// A host f32 copy of device logits [N, V].
Tensor StageToHost(const Context& ctx, const Tensor& logits) {
  Tensor wide = Tensor::Empty(logits.shape(), DType::kF32, logits.device());
  ops::Cast(ctx, logits, wide);
  return CopyToDevice(ctx, wide, Device::Cpu());
}

// host logits [N, V] -> loss [N] (AccumDType) by the vocab-parallel forward.
Tensor HostLosses(parallel::Communicator& tp, const Tensor& host, const Tensor& labels,
                  int64_t vocab_begin) {
  Tensor loss = Tensor::Empty({host.dim(0)}, AccumDType(host.dtype()));  // [N]
  parallel::VocabParallelCrossEntropyLoss(tp, host, labels, vocab_begin, loss);
  return loss;
}

}  // namespace

double SoftmaxCrossEntropySum(const Context& ctx, parallel::Communicator& tp, Tensor& logits,
                              const Tensor& labels, int64_t vocab_begin, double grad_scale) {
  const int64_t n = logits.dim(0);
  if (logits.is_cpu()) {
    Tensor loss = Tensor::Empty({n}, DType::kF32);  // [N]
    parallel::VocabParallelSoftmaxCrossEntropy(tp, logits, labels, vocab_begin, grad_scale, loss);
    return Sum(loss);
  }
  if (tp.size() == 1) {                                              // the fused device op
    const Tensor targets = CopyToDevice(ctx, labels, ctx.device());  // [N] i32
    Tensor loss = Tensor::Empty({n}, DType::kF32, ctx.device());     // [N]
    ops::SoftmaxCrossEntropy(ctx, logits, targets, grad_scale, loss);
    return Sum(CopyToDevice(ctx, loss, Device::Cpu()));
  }
  Tensor host = StageToHost(ctx, logits);  // [N, V] f32
  Tensor loss = Tensor::Empty({n}, DType::kF32);
  parallel::VocabParallelSoftmaxCrossEntropy(tp, host, labels, vocab_begin, grad_scale, loss);
  const Tensor gradient = CopyToDevice(ctx, host, ctx.device());  // [N, V] f32
  ops::Cast(ctx, gradient, logits);
  return Sum(loss);
}

double CrossEntropySum(const Context& ctx, parallel::Communicator& tp, const Tensor& logits,
                       const Tensor& labels, int64_t vocab_begin, Tensor* predictions) {
  const Tensor host = logits.is_cpu() ? logits : StageToHost(ctx, logits);  // [N, V]
  const double sum = Sum(HostLosses(tp, host, labels, vocab_begin));
  if (predictions != nullptr) parallel::VocabParallelArgmax(tp, host, vocab_begin, *predictions);
  return sum;
}

Tensor CrossEntropyLosses(const Context& ctx, parallel::Communicator& tp, const Tensor& logits,
                          const Tensor& labels, int64_t vocab_begin) {
  if (logits.is_cpu()) return HostLosses(tp, logits, labels, vocab_begin);
  if (tp.size() > 1) return HostLosses(tp, StageToHost(ctx, logits), labels, vocab_begin);
  const int64_t n = logits.dim(0);
  const DType accum = AccumDType(logits.dtype());
  const Tensor targets = CopyToDevice(ctx, labels, ctx.device());  // [N] i32
  Tensor loss = Tensor::Empty({n}, accum, ctx.device());           // [N]
  Tensor lse = Tensor::Empty({n}, accum, ctx.device());            // [N], unused
  ops::CrossEntropyForward(ctx, logits, targets, loss, lse);
  return CopyToDevice(ctx, loss, Device::Cpu());
}

int64_t CountCorrectPredictions(const Tensor& labels, const Tensor& predictions) {
  KELVIN_CHECK(labels.is_cpu() && predictions.is_cpu() && labels.numel() == predictions.numel())
      << labels.numel() << " labels vs " << predictions.numel() << " predictions";
  const int32_t* label = labels.data<int32_t>();           // [N]
  const int32_t* predicted = predictions.data<int32_t>();  // [N]
  int64_t correct = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    correct += label[i] != ops::kIgnoreIndex && label[i] == predicted[i] ? 1 : 0;
  }
  return correct;
}

}  // namespace kelvin::parallel
