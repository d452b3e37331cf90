// The CUDA resources behind a Context: device, compute stream, cuBLASLt handle and workspace.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "core/context.h"

namespace kelvin {

struct CudaResources {
  explicit CudaResources(int device_index);
  ~CudaResources();
  CudaResources(const CudaResources&) = delete;
  CudaResources& operator=(const CudaResources&) = delete;

  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;  // [workspace_bytes] scratch for cuBLASLt algorithms
  size_t workspace_bytes = 0;
};

// The stream ops enqueue on; aborts when ctx is not a CUDA context.
cudaStream_t StreamOf(const Context& ctx);
CudaResources& CudaOf(const Context& ctx);

}  // namespace kelvin
