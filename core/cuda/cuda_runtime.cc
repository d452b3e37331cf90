// CUDA device discovery, the CUDA Context, the device caching allocator and device copies.
#include <cublasLt.h>
#include <nccl.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/build_info.h"
#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace kelvin {
namespace {

struct DeviceQuery {
  int count = 0;
  std::string error;
};

const DeviceQuery& QueryDevices() {
  static const DeviceQuery query = [] {
    DeviceQuery q;
    const cudaError_t error = cudaGetDeviceCount(&q.count);
    if (error != cudaSuccess) {
      q.count = 0;
      q.error = "cudaGetDeviceCount: " + internal::DescribeCudaError(error);
      cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    } else if (q.count == 0) {
      q.error = "cudaGetDeviceCount found no device";
    }
    return q;
  }();
  return query;
}

class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int device) : device_(device) {}
  void* Allocate(size_t bytes) override {
    KELVIN_CUDA_CHECK(cudaSetDevice(device_));
    void* ptr = nullptr;
    const cudaError_t error = cudaMalloc(&ptr, bytes);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    KELVIN_CUDA_CHECK(error);
    return ptr;
  }
  void Free(void* ptr) override {
    KELVIN_CUDA_CHECK(cudaSetDevice(device_));  // the caller's thread may have another current
    KELVIN_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int device_;
};

}  // namespace

bool CudaAvailable() { return QueryDevices().count > 0; }
std::string CudaUnavailableReason() { return QueryDevices().error; }
int CudaDeviceCount() { return QueryDevices().count; }

int64_t DeviceMemoryBytes(const Device& device) {
  if (device.is_cpu()) return HostMemoryBytes();
  if (device.index < 0 || device.index >= CudaDeviceCount()) return 0;
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, device.index) != cudaSuccess) return 0;
  return static_cast<int64_t>(properties.totalGlobalMem);
}

std::string CudaLibraryVersions() {
  // Each query works without a GPU; a missing driver reports version 0.
  int runtime = 0, driver = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  ncclGetVersion(&nccl);
  const auto cuda_version = [](int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); };
  return absl::StrCat("CUDA runtime ", cuda_version(runtime), ", driver ",
                      driver == 0 ? std::string("none") : cuda_version(driver), ", cuBLASLt ",
                      cublasLtGetVersion(), ", NCCL ", nccl / 10000, ".", (nccl % 10000) / 100, ".",
                      nccl % 100);
}

Allocator& CudaAllocator(int index) {
  static std::mutex mutex;
  static std::array<CachingAllocator*, 64> allocators{};
  KELVIN_CHECK(CudaAvailable()) << "CUDA allocation requested but " << CudaUnavailableReason();
  KELVIN_CHECK(index >= 0 && index < CudaDeviceCount())
      << "CUDA device " << index << " requested; " << CudaDeviceCount() << " visible";
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = allocators[static_cast<size_t>(index)];
  // Never destroyed: tensors may outlive static destruction order.
  if (slot == nullptr) {
    slot = new CachingAllocator(std::make_unique<CudaRawAllocator>(index), Device::Cuda(index));
  }
  return *slot;
}

CudaResources::CudaResources(int device_index) : device(device_index) {
  KELVIN_CHECK(CudaAvailable()) << "CUDA context requested but " << CudaUnavailableReason();
  KELVIN_CUDA_CHECK(cudaSetDevice(device));
  KELVIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  KELVIN_CUBLAS_CHECK(cublasLtCreate(&cublaslt));
  workspace_bytes = static_cast<size_t>(kCublasLtWorkspaceBytes);
  workspace = CudaAllocator(device).Allocate(workspace_bytes);
}

CudaResources::~CudaResources() {
  cudaStreamSynchronize(stream);
  CudaAllocator(device).Deallocate(workspace, workspace_bytes);
  cublasLtDestroy(cublaslt);
  cudaStreamDestroy(stream);
}

Context Context::Cpu() { return Context(); }

Context Context::Cuda(int device_index) {
  Context ctx;
  ctx.device_ = Device::Cuda(device_index);
  ctx.cuda_ = std::make_shared<CudaResources>(device_index);
  return ctx;
}

void Context::Synchronize() const {
  if (cuda_ != nullptr) KELVIN_CUDA_CHECK(cudaStreamSynchronize(cuda_->stream));
}

CudaResources& CudaOf(const Context& ctx) {
  KELVIN_CHECK(ctx.cuda() != nullptr)
      << "a CUDA op was given a " << ctx.device().ToString() << " context";
  return *ctx.cuda();
}

cudaStream_t StreamOf(const Context& ctx) { return CudaOf(ctx).stream; }

namespace internal {

void CudaCopyBytes(const Context& ctx, const Tensor& src, Tensor& dst) {
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  if (src.is_cpu()) kind = cudaMemcpyHostToDevice;
  if (dst.is_cpu()) kind = src.is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost;
  KELVIN_CUDA_CHECK(
      cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), kind, StreamOf(ctx)));
  // Host memory is pageable: wait so the host side may be reused or read on return.
  if (src.is_cpu() || dst.is_cpu()) ctx.Synchronize();
}

void CudaZeroBytes(const Context& ctx, Tensor& t) {
  KELVIN_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), StreamOf(ctx)));
}

}  // namespace internal
}  // namespace kelvin
