// AdamW CPU kernel: one OpenMP-parallel, vectorisable loop over the n elements (element-wise, so
// bit-identical for any thread count).
#include <type_traits>

#include "core/ops/adamw.h"
#include "core/ops/dispatch.h"

namespace kelvin::ops::cpu {
namespace {

template <typename M, typename T>
M ConvertTo(T x) {
  if constexpr (std::is_same_v<M, bf16>) {
    return bf16(static_cast<float>(x));
  } else {
    return static_cast<M>(x);
  }
}

// master, grad, m, v [n] in T; model [n] in M or nullptr.
template <typename T, typename M>
void Step(T* master, const T* grad, T* m, T* v, M* model, int64_t n, const AdamWScalars& s) {
  const internal::AdamWCoefficients<T> c(s);
  // firstprivate: each thread's own copy, so the compiler knows the stores to the arrays cannot
  // change the coefficients and vectorises the loop (shared, they were reloaded per element).
#pragma omp parallel for simd schedule(static) firstprivate(c)
  for (int64_t i = 0; i < n; ++i) {
    master[i] = internal::AdamWUpdate(master[i], grad[i], m[i], v[i], c);
    if (model != nullptr) model[i] = ConvertTo<M>(master[i]);
  }
}

}  // namespace

void AdamWStep(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& model,
               const AdamWScalars& s) {
  DispatchCpuFloat(master.dtype(), "AdamWStep", [&]<typename T>() {
    const auto run = [&]<typename M>(M* model_data) {
      Step<T, M>(master.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), model_data,
                 master.numel(), s);
    };
    if (!model.defined()) return run(static_cast<T*>(nullptr));
    switch (model.dtype()) {
      case DType::kBF16:
        return run(model.data<bf16>());
      case DType::kF32:
        return run(model.data<float>());
      default:
        return run(model.data<T>());  // the master's dtype (checked by the dispatcher)
    }
  });
}

}  // namespace kelvin::ops::cpu
