// AdamW: hyperparameter and argument checks, the host-side step scalars, dispatch to the CPU or
// CUDA kernel.
#include "core/ops/adamw.h"

#include <cmath>
#include <utility>

#include "core/ops/dispatch.h"

namespace kelvin::ops {

AdamWScalars ComputeAdamWScalars(const AdamWHyperParams& hp, int64_t step) {
  KELVIN_CHECK_GE(step, 1) << "AdamWStep: step counts optimizer steps from 1";
  KELVIN_CHECK(hp.lr >= 0) << "AdamWStep: lr must be >= 0, got " << hp.lr;
  KELVIN_CHECK(hp.eps >= 0) << "AdamWStep: eps must be >= 0, got " << hp.eps;
  KELVIN_CHECK(hp.beta1 >= 0 && hp.beta1 < 1)
      << "AdamWStep: beta1 must be in [0, 1), got " << hp.beta1;
  KELVIN_CHECK(hp.beta2 >= 0 && hp.beta2 < 1)
      << "AdamWStep: beta2 must be in [0, 1), got " << hp.beta2;
  KELVIN_CHECK(hp.weight_decay >= 0)
      << "AdamWStep: weight_decay must be >= 0, got " << hp.weight_decay;
  const double steps = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(hp.beta1, steps);
  const double bias_correction2 = 1 - std::pow(hp.beta2, steps);
  return {.decay = 1 - hp.lr * hp.weight_decay,
          .beta1_weight = 1 - hp.beta1,
          .beta2 = hp.beta2,
          .one_minus_beta2 = 1 - hp.beta2,
          .bias_correction2_sqrt = std::sqrt(bias_correction2),
          .eps = hp.eps,
          .neg_step_size = -(hp.lr / bias_correction1)};
}

void AdamWStep(const Context& ctx, Tensor& master, const Tensor& grad, Tensor& m, Tensor& v,
               Tensor& model, const AdamWHyperParams& hp, int64_t step) {
  const AdamWScalars scalars = ComputeAdamWScalars(hp, step);
  KELVIN_CHECK(master.dtype() == DType::kF32 || master.dtype() == DType::kF64)
      << "adamw.master must be f32 (or f64 in tests), got " << master.ToString();
  const int64_t n = master.numel();
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&grad, "adamw.grad"},
                                {&m, "adamw.m"},
                                {&v, "adamw.v"}}) {
    KELVIN_CHECK_EQ(t->numel(), n) << name << " is " << t->ToString() << ", expected " << n
                                   << " elements like adamw.master " << master.ToString();
    CheckDType(*t, master.dtype(), name);
  }
  CheckDevice(ctx, {&master, &grad, &m, &v}, "AdamWStep");
  if (model.defined()) {
    KELVIN_CHECK_EQ(model.numel(), n) << "adamw.model is " << model.ToString() << ", expected " << n
                                      << " elements like adamw.master";
    KELVIN_CHECK(model.dtype() == DType::kF32 || model.dtype() == DType::kBF16 ||
                 model.dtype() == master.dtype())
        << "adamw.model must be f32, bf16 or the master's dtype, got " << model.ToString();
    CheckDevice(ctx, {&model}, "AdamWStep");
  }
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::AdamWStep(ctx, master, grad, m, v, model, scalars);
#endif
  cpu::AdamWStep(master, grad, m, v, model, scalars);
}

}  // namespace kelvin::ops
