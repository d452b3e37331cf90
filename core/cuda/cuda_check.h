// Check macros for CUDA runtime, cuBLAS/cuBLASLt and NCCL calls: on failure they print file:line,
// the rank, the failed call and the decoded error (name and description), then abort.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/check.h"

namespace kelvin::internal {

std::string DescribeCudaError(cudaError_t error);  // "cudaErrorInvalidValue: invalid argument"
std::string DescribeCublasStatus(cublasStatus_t status);  // "CUBLAS_STATUS_...: <description>"
std::string DescribeNcclResult(ncclResult_t result);      // "ncclInvalidArgument: <description>"

}  // namespace kelvin::internal

#define KELVIN_CUDA_CHECK(call)                                                        \
  do {                                                                                 \
    const cudaError_t kelvin_cuda_error_ = (call);                                     \
    if (kelvin_cuda_error_ != cudaSuccess) {                                           \
      ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #call).stream()             \
          << "returned " << ::kelvin::internal::DescribeCudaError(kelvin_cuda_error_); \
    }                                                                                  \
  } while (0)

#define KELVIN_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    const cublasStatus_t kelvin_cublas_status_ = (call);                                     \
    if (kelvin_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                    \
      ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #call).stream()                   \
          << "returned " << ::kelvin::internal::DescribeCublasStatus(kelvin_cublas_status_); \
    }                                                                                        \
  } while (0)

#define KELVIN_NCCL_CHECK(call)                                                          \
  do {                                                                                   \
    const ncclResult_t kelvin_nccl_result_ = (call);                                     \
    if (kelvin_nccl_result_ != ncclSuccess) {                                            \
      ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #call).stream()               \
          << "returned " << ::kelvin::internal::DescribeNcclResult(kelvin_nccl_result_); \
    }                                                                                    \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site.
#define KELVIN_CUDA_CHECK_LAUNCH() KELVIN_CUDA_CHECK(cudaGetLastError())
