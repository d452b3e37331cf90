// Cross-entropy: argument checks, dispatch to the CPU or CUDA kernel, and the mean-loss wrapper.
// N tokens, V vocabulary.
#include "core/ops/cross_entropy.h"

#include "core/copy.h"
#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

// logits [N, V], targets [N] i32, and an AccumDType [N] statistic per row (loss or lse).
void CheckCommon(const Context& ctx, const Tensor& logits, const Tensor& targets,
                 const Tensor& per_row, std::string_view per_row_name, std::string_view op) {
  KELVIN_CHECK_EQ(logits.ndim(), 2)
      << "cross_entropy.logits must be [N, V], got " << logits.ToString();
  KELVIN_CHECK_GE(logits.dim(1), 1)
      << "cross_entropy.logits needs a vocabulary, got " << logits.ToString();
  const int64_t n = logits.dim(0);
  CheckShape(targets, {n}, "cross_entropy.targets");
  CheckDType(targets, DType::kI32, "cross_entropy.targets");
  CheckShape(per_row, {n}, per_row_name);
  CheckDType(per_row, AccumDType(logits.dtype()), per_row_name);
  CheckDevice(ctx, {&logits, &targets, &per_row}, op);
}

}  // namespace

void CrossEntropyForward(const Context& ctx, const Tensor& logits, const Tensor& targets,
                         Tensor& loss, Tensor& lse) {
  CheckCommon(ctx, logits, targets, loss, "cross_entropy.loss", "CrossEntropyForward");
  CheckCommon(ctx, logits, targets, lse, "cross_entropy.lse", "CrossEntropyForward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::CrossEntropyForward(ctx, logits, targets, loss, lse);
#endif
  cpu::CrossEntropyForward(logits, targets, loss, lse);
}

void CrossEntropyBackward(const Context& ctx, Tensor& logits, const Tensor& targets,
                          const Tensor& lse, double grad_scale) {
  CheckCommon(ctx, logits, targets, lse, "cross_entropy.lse", "CrossEntropyBackward");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::CrossEntropyBackward(ctx, logits, targets, lse, grad_scale);
#endif
  cpu::CrossEntropyBackward(logits, targets, lse, grad_scale);
}

void SoftmaxCrossEntropy(const Context& ctx, Tensor& logits, const Tensor& targets,
                         double grad_scale, Tensor& loss) {
  CheckCommon(ctx, logits, targets, loss, "cross_entropy.loss", "SoftmaxCrossEntropy");
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::SoftmaxCrossEntropy(ctx, logits, targets, grad_scale, loss);
#endif
  cpu::SoftmaxCrossEntropy(logits, targets, grad_scale, loss);
}

int64_t CountNonIgnored(const Context& ctx, const Tensor& targets) {
  KELVIN_CHECK_EQ(targets.ndim(), 1)
      << "cross_entropy.targets must be [N], got " << targets.ToString();
  CheckDType(targets, DType::kI32, "cross_entropy.targets");
  const Tensor host = targets.is_cpu() ? targets : CopyToDevice(ctx, targets, Device::Cpu());
  const int32_t* t = host.data<int32_t>();  // [N]
  int64_t count = 0;
  for (int64_t i = 0; i < host.numel(); ++i) count += t[i] != kIgnoreIndex;
  return count;
}

double SoftmaxCrossEntropyMean(const Context& ctx, Tensor& logits, const Tensor& targets) {
  KELVIN_CHECK_EQ(logits.ndim(), 2)
      << "cross_entropy.logits must be [N, V], got " << logits.ToString();
  const int64_t count = CountNonIgnored(ctx, targets);
  // With no counted token every row is ignored: its gradient is zero whatever the scale.
  const double grad_scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  Tensor loss = Tensor::Empty({logits.dim(0)}, AccumDType(logits.dtype()), ctx.device());  // [N]
  SoftmaxCrossEntropy(ctx, logits, targets, grad_scale, loss);
  const Tensor host = loss.is_cpu() ? loss : CopyToDevice(ctx, loss, Device::Cpu());  // [N]
  double sum = 0;
  DispatchCpuFloat(host.dtype(), "SoftmaxCrossEntropyMean", [&]<typename T>() {
    const T* l = host.data<T>();
    for (int64_t i = 0; i < host.numel(); ++i) sum += static_cast<double>(l[i]);
  });
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

}  // namespace kelvin::ops
