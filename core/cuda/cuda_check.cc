// Decoding of CUDA runtime, cuBLAS and NCCL error codes for the check macros.
#include "core/cuda/cuda_check.h"

#include <cublas_api.h>

namespace kelvin::internal {

std::string DescribeCudaError(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

std::string DescribeCublasStatus(cublasStatus_t status) {
  return std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status);
}

std::string DescribeNcclResult(ncclResult_t result) {
  const char* name = "ncclUnknownResult";
  switch (result) {
    case ncclSuccess:
      name = "ncclSuccess";
      break;
    case ncclUnhandledCudaError:
      name = "ncclUnhandledCudaError";
      break;
    case ncclSystemError:
      name = "ncclSystemError";
      break;
    case ncclInternalError:
      name = "ncclInternalError";
      break;
    case ncclInvalidArgument:
      name = "ncclInvalidArgument";
      break;
    case ncclInvalidUsage:
      name = "ncclInvalidUsage";
      break;
    case ncclRemoteError:
      name = "ncclRemoteError";
      break;
    case ncclInProgress:
      name = "ncclInProgress";
      break;
    default:
      break;
  }
  std::string text = std::string(name) + ": " + ncclGetErrorString(result);
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0') {
    text += " (last NCCL error: " + std::string(last) + ")";
  }
  return text;
}

}  // namespace kelvin::internal
