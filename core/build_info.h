// What built this binary and what it runs on, for the start of a run's log, checkpoints and
// `kelvin --version`: Kelvin's version and source commit, and the versions of the numeric and
// CUDA libraries it loaded.
#pragma once

#include <string>

namespace kelvin {

// "0.1.0 (git abc123def456)"; "-dirty" after the commit when built with uncommitted changes.
std::string KelvinVersion();

// "OpenBLAS 0.3.21 (...); CUDA runtime 13.0, driver 12.8, cuBLASLt 130000, NCCL 2.27.3", or
// "...; built without CUDA".
std::string LibraryVersions();

// The CUDA part of LibraryVersions (core/cuda/cuda_runtime.cc or core/cuda_unavailable.cc).
std::string CudaLibraryVersions();

}  // namespace kelvin
