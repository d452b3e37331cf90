// CPU allocator and the device-independent caching allocator.
#include "core/allocator.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <new>

#include "core/check.h"

namespace kelvin {
namespace {

class AlignedCpuAllocator final : public Allocator {
 public:
  // glibc unmaps a large freed block (and trims the heap top past 128 KiB), so the next step's
  // same-sized scratch faults every page in and zeroes it again: ~6% of a T = 2048 SSA attention
  // step on the CPU (bench/RESULTS.md, 2026-11-30). Kelvin allocates the same sizes every step, so
  // the process keeps freed host memory for reuse: blocks up to 32 MiB (glibc's largest threshold)
  // come from the heap, and the heap is trimmed only past 1 GiB free at its top. Process-wide:
  // std::vector scratch of the CPU kernels profits too.
  AlignedCpuAllocator() {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }

  void* Allocate(size_t bytes) override {
    const size_t rounded =
        (std::max<size_t>(bytes, 1) + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded);
    if (ptr == nullptr) {
      KELVIN_FATAL() << "host allocation of " << FormatBytes(bytes) << " failed ("
                     << FormatBytes(stats().bytes_in_use) << " in use by Kelvin)";
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.bytes_in_use += rounded;
    stats_.bytes_reserved += rounded;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    ++stats_.num_allocations;
    ++stats_.num_raw_allocations;
    return ptr;
  }

  void Deallocate(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
    const size_t rounded =
        (std::max<size_t>(bytes, 1) + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    std::free(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.bytes_in_use -= rounded;
    stats_.bytes_reserved -= rounded;
  }

  Device device() const override { return Device::Cpu(); }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& CpuAllocator() {
  static AlignedCpuAllocator* allocator = new AlignedCpuAllocator();  // never destroyed
  return *allocator;
}

std::string FormatBytes(size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof(text), "%.2f %s", value, kUnits[unit]);
  }
  return text;
}

CachingAllocator::CachingAllocator(std::unique_ptr<RawAllocator> raw, Device device)
    : raw_(std::move(raw)), device_(device) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  EmptyCacheLocked();
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  constexpr size_t kSmallGranule = 512;
  constexpr size_t kLargeGranule = size_t{2} << 20;
  constexpr size_t kLargeThreshold = size_t{1} << 20;
  bytes = std::max<size_t>(bytes, 1);
  const size_t granule = bytes < kLargeThreshold ? kSmallGranule : kLargeGranule;
  return (bytes + granule - 1) / granule * granule;
}

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t rounded = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  if (auto it = free_blocks_.find(rounded); it != free_blocks_.end()) {
    ptr = it->second;
    free_blocks_.erase(it);
  } else {
    ptr = raw_->Allocate(rounded);
    if (ptr == nullptr) {
      EmptyCacheLocked();
      ptr = raw_->Allocate(rounded);
    }
    if (ptr == nullptr) {
      KELVIN_FATAL() << "out of memory on " << device_.ToString() << ": requested "
                     << FormatBytes(bytes) << " with " << FormatBytes(stats_.bytes_in_use)
                     << " in use by Kelvin (peak " << FormatBytes(stats_.peak_bytes_in_use)
                     << "). Reduce the micro-batch or sequence length, turn on activation "
                        "recompute, or shard further (tensor/pipeline parallel).";
    }
    stats_.bytes_reserved += rounded;
    ++stats_.num_raw_allocations;
  }
  live_blocks_.emplace(ptr, rounded);
  stats_.bytes_in_use += rounded;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.num_allocations;
  return ptr;
}

void CachingAllocator::Deallocate(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_blocks_.find(ptr);
  KELVIN_CHECK(it != live_blocks_.end())
      << "freeing " << ptr << " which this allocator did not hand out on " << device_.ToString();
  free_blocks_.emplace(it->second, ptr);
  stats_.bytes_in_use -= it->second;
  live_blocks_.erase(it);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  EmptyCacheLocked();
}

void CachingAllocator::EmptyCacheLocked() {
  for (const auto& [size, ptr] : free_blocks_) {
    raw_->Free(ptr);
    stats_.bytes_reserved -= size;
  }
  free_blocks_.clear();
}

Allocator& AllocatorFor(Device device) {
  return device.is_cpu() ? CpuAllocator() : CudaAllocator(device.index);
}

}  // namespace kelvin
