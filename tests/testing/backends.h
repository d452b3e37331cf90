// The backends every op is tested on: fast CPU in f32 and f64, CUDA in f32 and bf16. CUDA cases
// skip with "no CUDA device: <reason>" where there is none, and run (and must pass) where there is.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/context.h"
#include "core/device.h"
#include "core/tensor.h"

namespace kelvin::testing {

struct Backend {
  Device device;
  DType dtype;
  std::string Name() const;  // "cpu_f32", "cuda_bf16": CUDA cases have "cuda" in their names
};

std::vector<Backend> CpuBackends();   // cpu_f32, cpu_f64
std::vector<Backend> CudaBackends();  // cuda_f32, cuda_bf16
std::vector<Backend> AllBackends();   // both lists

// One Context per device for the whole test program.
const Context& ContextFor(Device device);

// Host tensor -> the backend's dtype on the backend's device.
Tensor ToBackend(const Tensor& host, const Backend& backend);
// Host tensor -> the same dtype on `device`.
Tensor ToDevice(const Tensor& host, Device device);

// gtest's parameter-name printer for Backend parameters.
struct BackendName {
  std::string operator()(const ::testing::TestParamInfo<Backend>& info) const {
    return info.param.Name();
  }
};

}  // namespace kelvin::testing

// First statement of a test that may run on CUDA.
#define KELVIN_SKIP_WITHOUT_CUDA(device)                                       \
  do {                                                                         \
    if ((device).is_cuda() && !::kelvin::CudaAvailable()) {                    \
      GTEST_SKIP() << "no CUDA device: " << ::kelvin::CudaUnavailableReason(); \
    }                                                                          \
  } while (0)
