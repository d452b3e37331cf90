// Backend lists and per-device test contexts.
#include "tests/testing/backends.h"

#include <map>
#include <mutex>

#include "core/copy.h"
#include "tests/testing/tensors.h"

namespace kelvin::testing {

std::string Backend::Name() const {
  return std::string(device.is_cpu() ? "cpu_" : "cuda_") + std::string(DTypeName(dtype));
}

std::vector<Backend> CpuBackends() {
  return {{Device::Cpu(), DType::kF32}, {Device::Cpu(), DType::kF64}};
}

std::vector<Backend> CudaBackends() {
  return {{Device::Cuda(0), DType::kF32}, {Device::Cuda(0), DType::kBF16}};
}

std::vector<Backend> AllBackends() {
  std::vector<Backend> all = CpuBackends();
  for (const Backend& b : CudaBackends()) all.push_back(b);
  return all;
}

const Context& ContextFor(Device device) {
  static std::mutex mutex;
  static auto* contexts = new std::map<int, Context>();  // CUDA ordinal -> context
  static const Context cpu = Context::Cpu();
  if (device.is_cpu()) return cpu;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = contexts->find(device.index);
  if (it == contexts->end())
    it = contexts->emplace(device.index, Context::Cuda(device.index)).first;
  return it->second;
}

Tensor ToDevice(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
  return CopyToDevice(ContextFor(device), host, device);
}

Tensor ToBackend(const Tensor& host, const Backend& backend) {
  return ToDevice(host.dtype() == backend.dtype ? host : Cast(host, backend.dtype), backend.device);
}

}  // namespace kelvin::testing
