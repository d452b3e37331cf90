// Context: what an op needs to run on a device. For CUDA: the device, its compute stream and a
// cuBLASLt handle with its workspace (see core/cuda/cuda_context.h). For the CPU: nothing else.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device.h"

namespace kelvin {

// The cuBLASLt workspace of each CUDA Context: 32 MiB, cuBLASLt's recommendation for Hopper.
inline constexpr int64_t kCublasLtWorkspaceBytes = int64_t{32} << 20;

struct CudaResources;  // defined in core/cuda/cuda_context.h (CUDA builds only)

class Context {
 public:
  static Context Cpu();
  // Selects the device, creates a non-blocking stream, a cuBLASLt handle and its workspace.
  // Aborts with the reason when CUDA is unavailable (check CudaAvailable() first).
  static Context Cuda(int device_index = 0);

  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  void Synchronize() const;  // waits for all work queued on this context's stream
  CudaResources* cuda() const { return cuda_.get(); }

 private:
  Device device_;
  std::shared_ptr<CudaResources> cuda_;
};

}  // namespace kelvin
