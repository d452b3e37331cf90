// Where a tensor lives: the host, or one CUDA device by index.
#pragma once

#include <cstdint>
#include <string>

namespace kelvin {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device Cpu() { return {DeviceType::kCpu, 0}; }
  static Device Cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  bool operator==(const Device&) const = default;
  std::string ToString() const {  // "cpu", "cuda:0"
    return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};

// Whether this build has CUDA and a usable device; when not, `CudaUnavailableReason` says why
// (e.g. "built with KELVIN_CUDA=OFF" or "cudaGetDeviceCount: CUDA driver version is insufficient").
bool CudaAvailable();
std::string CudaUnavailableReason();
int CudaDeviceCount();

// The memory a device has for Kelvin's tensors: the host's physical memory for the CPU, the GPU's
// total memory for a CUDA device (0 when it is not usable).
int64_t DeviceMemoryBytes(const Device& device);
int64_t HostMemoryBytes();

}  // namespace kelvin
