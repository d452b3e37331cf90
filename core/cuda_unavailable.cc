// CPU-only builds (KELVIN_CUDA=OFF): every CUDA entry point reports that CUDA is not built in.
#include "core/allocator.h"
#include "core/build_info.h"
#include "core/copy.h"
#include "core/device.h"
#include "core/profile_range.h"

namespace kelvin {

bool CudaAvailable() { return false; }
std::string CudaUnavailableReason() { return "Kelvin was built with KELVIN_CUDA=OFF"; }
int CudaDeviceCount() { return 0; }
int64_t DeviceMemoryBytes(const Device& device) { return device.is_cpu() ? HostMemoryBytes() : 0; }
std::string CudaLibraryVersions() { return "built without CUDA"; }

ProfileRange::ProfileRange(const std::string&) {}
ProfileRange::~ProfileRange() {}
void StartProfilerCapture() {}
void StopProfilerCapture() {}

Allocator& CudaAllocator(int index) {
  KELVIN_FATAL() << "CUDA device " << index << " requested, but " << CudaUnavailableReason();
}

struct CudaResources {};

Context Context::Cpu() { return Context(); }

Context Context::Cuda(int device_index) {
  KELVIN_FATAL() << "CUDA context for device " << device_index << " requested, but "
                 << CudaUnavailableReason();
}

void Context::Synchronize() const {}

namespace internal {
void CudaCopyBytes(const Context&, const Tensor& src, Tensor& dst) {
  KELVIN_FATAL() << "copy " << src.ToString() << " -> " << dst.ToString() << ": "
                 << CudaUnavailableReason();
}
void CudaZeroBytes(const Context&, Tensor& t) {
  KELVIN_FATAL() << "zero " << t.ToString() << ": " << CudaUnavailableReason();
}
}  // namespace internal
}  // namespace kelvin
