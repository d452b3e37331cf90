// Copies between tensors on any devices (host<->device through the context's stream) and zeroing.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin {

// dst = src; same dtype and element count; either may live on the host or a CUDA device.
// Device-to-host copies wait for the stream, so the host data is ready on return.
void CopyTensor(const Context& ctx, const Tensor& src, Tensor& dst);

// A new tensor on `device` holding src's values.
Tensor CopyToDevice(const Context& ctx, const Tensor& src, Device device);

// Sets every byte of t to zero (0.0 in every float dtype).
void Zero(const Context& ctx, Tensor& t);

// A new tensor of zeros on ctx's device.
Tensor Zeros(const Context& ctx, const Shape& shape, DType dtype);

namespace internal {
// The CUDA side of CopyTensor/Zero (core/cuda/cuda_copy.cc; aborts in CPU-only builds).
void CudaCopyBytes(const Context& ctx, const Tensor& src, Tensor& dst);
void CudaZeroBytes(const Context& ctx, Tensor& t);
}  // namespace internal

}  // namespace kelvin
