// Memory allocators: the 64-byte aligned CPU allocator and a caching allocator for device memory
// that keeps freed blocks for reuse, over a raw allocator (cudaMalloc in production, a fake in
// tests). Caching assumes one stream per device uses the memory (Kelvin's compute stream);
// memory handed to another stream must be synchronised by the caller before it is freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/device.h"

namespace kelvin {

struct AllocatorStats {
  size_t bytes_in_use = 0;  // handed out and not yet freed
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;  // obtained from the raw allocator (in use + cached)
  int64_t num_allocations = 0;
  int64_t num_raw_allocations = 0;  // calls that reached the raw allocator (cache misses)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns nullptr: running out of memory aborts with the request and the usage stats.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
};

// The process-wide host allocator: 64-byte aligned blocks (AVX-512 lines, no false sharing).
Allocator& CpuAllocator();
inline constexpr size_t kCpuAlignment = 64;

// Raw device memory, the layer below the cache. Allocate returns nullptr when out of memory.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
};

// Rounds requests up (512 B below 1 MiB, 2 MiB above), serves them from cached free blocks of the
// same rounded size when it can, and on a raw failure releases the cache and retries once.
class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(std::unique_ptr<RawAllocator> raw, Device device);
  ~CachingAllocator() override;

  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return device_; }
  AllocatorStats stats() const override;

  void EmptyCache();  // returns every cached free block to the raw allocator
  static size_t RoundSize(size_t bytes);

 private:
  void EmptyCacheLocked();

  std::unique_ptr<RawAllocator> raw_;
  Device device_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;       // rounded size -> cached block
  std::unordered_map<void*, size_t> live_blocks_;  // block -> rounded size
  AllocatorStats stats_;
};

// The caching allocator of CUDA device `index` (aborts when CUDA is unavailable).
Allocator& CudaAllocator(int index);

// The allocator for a device.
Allocator& AllocatorFor(Device device);

std::string FormatBytes(size_t bytes);  // "1.50 GiB"

}  // namespace kelvin
