// Host copies and dispatch of device copies.
#include "core/copy.h"

#include <cstring>

namespace kelvin {

void CopyTensor(const Context& ctx, const Tensor& src, Tensor& dst) {
  KELVIN_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel())
      << "CopyTensor from " << src.ToString() << " to " << dst.ToString();
  if (src.numel() == 0) return;
  if (src.is_cpu() && dst.is_cpu()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  } else {
    internal::CudaCopyBytes(ctx, src, dst);
  }
}

Tensor CopyToDevice(const Context& ctx, const Tensor& src, Device device) {
  Tensor dst = Tensor::Empty(src.shape(), src.dtype(), device);
  CopyTensor(ctx, src, dst);
  return dst;
}

void Zero(const Context& ctx, Tensor& t) {
  if (t.numel() == 0) return;
  if (t.is_cpu()) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    internal::CudaZeroBytes(ctx, t);
  }
}

Tensor Zeros(const Context& ctx, const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, ctx.device());
  Zero(ctx, t);
  return t;
}

}  // namespace kelvin
