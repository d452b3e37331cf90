// Hashed dropout's CPU kernel: OpenMP over the N * F elements, each one's mask hashed alone.
#include <cstdint>

#include "core/ops/dispatch.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"

namespace kelvin::ops::cpu {

void HashedDropout(const Tensor& x, const Tensor& token_keys, uint64_t site, int64_t feature_begin,
                   uint64_t threshold, double scale, Tensor& y) {
  const int64_t features = x.dim(1);
  const auto* keys = token_keys.data<int64_t>();
  DispatchCpuFloat(x.dtype(), "HashedDropout", [&]<typename T>() {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const T s = static_cast<T>(scale);
    ForEachIndex(x.numel(), [=](int64_t i) {
      const int64_t n = i / features, f = i % features;
      const bool keep =
          DropoutKeeps(static_cast<uint64_t>(keys[n]), site, feature_begin + f, threshold);
      out[i] = keep ? in[i] * s : T(0);
    });
  });
}

}  // namespace kelvin::ops::cpu
