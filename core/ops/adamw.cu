// AdamW CUDA kernel: a grid-stride loop over the n elements of an f32 master chunk, writing the
// optional f32 or bf16 model copy in the same pass.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/ops/adamw.h"
#include "core/ops/dispatch.h"

namespace kelvin::ops::cuda {
namespace {

using cuda_utils::FromFloat;

constexpr int kThreads = 256;

// master, grad, m, v [n] f32; model [n] in M or nullptr.
template <typename M>
__global__ void StepKernel(float* master, const float* grad, float* m, float* v, M* model,
                           int64_t n, internal::AdamWCoefficients<float> c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float p = internal::AdamWUpdate(master[i], grad[i], m[i], v[i], c);
    master[i] = p;
    if (model != nullptr) model[i] = FromFloat<M>(p);
  }
}

}  // namespace

void AdamWStep(const Context& ctx, Tensor& master, const Tensor& grad, Tensor& m, Tensor& v,
               Tensor& model, const AdamWScalars& s) {
  KELVIN_CHECK(master.dtype() == DType::kF32)
      << "AdamWStep on CUDA supports f32 master weights, got " << master.ToString();
  const int64_t n = master.numel();
  if (n == 0) return;
  const internal::AdamWCoefficients<float> c(s);
  const auto launch = [&]<typename M>(M* model_data) {
    StepKernel<M><<<cuda_utils::GridFor(n, kThreads), kThreads, 0, StreamOf(ctx)>>>(
        master.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), model_data, n,
        c);
    KELVIN_CUDA_CHECK_LAUNCH();
  };
  if (!model.defined()) return launch(static_cast<float*>(nullptr));
  DispatchCudaFloat(model.dtype(), "AdamWStep (model copy)",
                    [&]<typename M>() { launch(model.data<M>()); });
}

}  // namespace kelvin::ops::cuda
