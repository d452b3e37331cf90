// AdamW: three consecutive steps of the fast CPU and CUDA kernels against the f64 reference (weight
// decay on and off; model copy none, in the backend's dtype, and bf16), one step computed by hand,
// and argument errors.
#include "core/ops/adamw.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "core/ops/reference/adamw.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

constexpr int kSteps = 3;

class AdamWTest : public ::testing::TestWithParam<Backend> {};

// master is AccumDType of the backend's dtype (f32, or f64 on cpu_f64); the model copy is none,
// the backend's dtype, or bf16.
TEST_P(AdamWTest, ConsecutiveStepsMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const Device dev = backend.device;
  const DType master_dtype = AccumDType(backend.dtype);
  const double tol = testing::RelTolerance(master_dtype);
  std::vector<std::optional<DType>> model_dtypes = {std::nullopt, backend.dtype};  // none first
  if (backend.dtype != DType::kBF16) model_dtypes.push_back(DType::kBF16);
  uint64_t seed = 500;
  for (const int64_t n : {int64_t{1}, int64_t{1031}, int64_t{4099}}) {
    for (const double weight_decay : {0.0, 0.1}) {
      for (const std::optional<DType> model_dtype : model_dtypes) {
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " weight_decay=" << weight_decay
                     << " model=" << (model_dtype ? DTypeName(*model_dtype) : "none"));
        const ops::AdamWHyperParams hp{.lr = 2e-3, .weight_decay = weight_decay};
        // f64 reference state, and the kernel's state rounded to its dtypes from the same values.
        Tensor master_ref = testing::Cast(testing::Random({n}, master_dtype, ++seed), DType::kF64);
        Tensor m_ref =
            testing::Cast(testing::Random({n}, master_dtype, ++seed, -0.1, 0.1), DType::kF64);
        Tensor v_ref =
            testing::Cast(testing::Random({n}, master_dtype, ++seed, 0, 0.01), DType::kF64);
        Tensor master = testing::ToDevice(testing::Cast(master_ref, master_dtype), dev);
        Tensor m = testing::ToDevice(testing::Cast(m_ref, master_dtype), dev);
        Tensor v = testing::ToDevice(testing::Cast(v_ref, master_dtype), dev);
        Tensor model = model_dtype ? Tensor::Empty({n}, *model_dtype, dev) : Tensor();
        Tensor no_model;
        for (int64_t step = 1; step <= kSteps; ++step) {
          SCOPED_TRACE(::testing::Message() << "step " << step);
          const Tensor grad = testing::Random({n}, master_dtype, ++seed);
          reference::AdamWStep(master_ref, testing::Cast(grad, DType::kF64), m_ref, v_ref, no_model,
                               hp, step);
          ops::AdamWStep(ctx, master, testing::ToDevice(grad, dev), m, v, model, hp, step);
          EXPECT_TRUE(testing::AllClose(master, master_ref, tol, "master"));
          EXPECT_TRUE(testing::AllClose(m, m_ref, tol, "exp_avg"));
          EXPECT_TRUE(testing::AllClose(v, v_ref, tol, "exp_avg_sq"));
          // The model copy is the updated master rounded once to the model's dtype.
          if (model_dtype) {
            EXPECT_TRUE(
                testing::BitIdentical(model, testing::Cast(master, *model_dtype), "model copy"));
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AdamWTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// One element, step 1, lr = 0.1, betas (0.9, 0.999), eps = 1e-8, weight_decay = 0.1,
// param = 1, grad = 0.5, m = v = 0:
//   param = 1 * (1 - 0.1 * 0.1)                       = 0.99
//   m     = 0 + (1 - 0.9) * (0.5 - 0)                 = 0.05
//   v     = 0 * 0.999 + (1 - 0.999) * 0.5 * 0.5       = 0.00025
//   step_size = 0.1 / (1 - 0.9)                       = 1
//   denom = sqrt(0.00025) / sqrt(1 - 0.999) + 1e-8    = 0.5 + 1e-8
//   param = 0.99 - 1 * 0.05 / (0.5 + 1e-8)            = 0.99 - 0.1 / (1 + 2e-8)
//         = 0.89 + 2e-9 - 4e-17 + ...                 = 0.890000002 (to 1e-16)
TEST(AdamWHandComputed, OneStepOfOneElement) {
  const ops::AdamWHyperParams hp{
      .lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  const Context& ctx = testing::ContextFor(Device::Cpu());
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor master = testing::Full({1}, DType::kF64, 1.0);
    const Tensor grad = testing::Full({1}, DType::kF64, 0.5);
    Tensor m = testing::Full({1}, DType::kF64, 0.0), v = testing::Full({1}, DType::kF64, 0.0);
    Tensor model = Tensor::Empty({1}, DType::kF32);
    if (fast) {
      ops::AdamWStep(ctx, master, grad, m, v, model, hp, 1);
    } else {
      reference::AdamWStep(master, grad, m, v, model, hp, 1);
    }
    EXPECT_NEAR(master.data<double>()[0], 0.890000002, 1e-15);
    EXPECT_NEAR(m.data<double>()[0], 0.05, 1e-16);
    EXPECT_NEAR(v.data<double>()[0], 0.00025, 1e-18);
    EXPECT_EQ(model.data<float>()[0], 0.890000002f);
  }
}

TEST(AdamWErrors, BadArgumentsAbortWithTheirNames) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  Tensor master = testing::Full({4}, DType::kF32, 1.0), m = testing::Full({4}, DType::kF32, 0.0);
  Tensor v = testing::Full({4}, DType::kF32, 0.0), none;
  const Tensor grad = testing::Full({2, 2}, DType::kF32, 0.5);  // any shape with n elements
  ops::AdamWStep(ctx, master, grad, m, v, none, {}, 1);
  EXPECT_DEATH(ops::AdamWStep(ctx, master, grad, m, v, none, {}, 0),
               "step counts optimizer steps from 1");
  EXPECT_DEATH(ops::AdamWStep(ctx, master, grad, m, v, none, {.beta2 = 1.0}, 1),
               "beta2 must be in \\[0, 1\\)");
  const Tensor short_grad = testing::Full({3}, DType::kF32, 0.5);
  EXPECT_DEATH(ops::AdamWStep(ctx, master, short_grad, m, v, none, {}, 1),
               "adamw.grad is f32\\[3\\]@cpu, expected 4 elements");
  Tensor m_f64 = testing::Full({4}, DType::kF64, 0.0);
  EXPECT_DEATH(ops::AdamWStep(ctx, master, grad, m_f64, v, none, {}, 1),
               "adamw.m is f64\\[4\\]@cpu, expected dtype f32");
  Tensor model_i32 = Tensor::Empty({4}, DType::kI32);
  EXPECT_DEATH(ops::AdamWStep(ctx, master, grad, m, v, model_i32, {}, 1),
               "adamw.model must be f32, bf16 or the master's dtype");
}

}  // namespace
}  // namespace kelvin
