// NVTX ranges and the CUDA profiler's capture window (see core/profile_range.h).
#include "core/profile_range.h"

#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>

#include "core/cuda/cuda_check.h"

namespace kelvin {

ProfileRange::ProfileRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
ProfileRange::~ProfileRange() { nvtxRangePop(); }

void StartProfilerCapture() { KELVIN_CUDA_CHECK(cudaProfilerStart()); }
void StopProfilerCapture() { KELVIN_CUDA_CHECK(cudaProfilerStop()); }

}  // namespace kelvin
