// Allocators: CPU alignment and accounting; the caching allocator's reuse, rounding, retry after
// releasing its cache, and its out-of-memory message (over a fake raw allocator, and on CUDA).
#include "core/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

namespace kelvin {
namespace {

// Hands out host memory up to a byte limit and counts calls, standing in for cudaMalloc.
class FakeRawAllocator final : public RawAllocator {
 public:
  explicit FakeRawAllocator(size_t limit, int* live) : limit_(limit), live_(live) {}
  void* Allocate(size_t bytes) override {
    if (used_ + bytes > limit_) return nullptr;
    used_ += bytes;
    ++*live_;
    void* p = std::malloc(bytes);
    sizes_by_ptr_.emplace(p, bytes);
    return p;
  }
  void Free(void* ptr) override {
    used_ -= sizes_by_ptr_.at(ptr);
    sizes_by_ptr_.erase(ptr);
    --*live_;
    std::free(ptr);
  }

 private:
  size_t limit_;
  size_t used_ = 0;
  int* live_;  // blocks currently held, visible to the test
  std::map<void*, size_t> sizes_by_ptr_;
};

TEST(CpuAllocator, AlignsAndAccounts) {
  Allocator& cpu = CpuAllocator();
  const size_t before = cpu.stats().bytes_in_use;
  void* p = cpu.Allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kCpuAlignment, 0u);
  EXPECT_EQ(cpu.stats().bytes_in_use, before + 128);  // rounded to 64-byte lines
  cpu.Deallocate(p, 100);
  EXPECT_EQ(cpu.stats().bytes_in_use, before);
  void* zero = cpu.Allocate(0);  // a zero-byte request still yields a distinct valid pointer
  EXPECT_NE(zero, nullptr);
  cpu.Deallocate(zero, 0);
}

TEST(CachingAllocator, RoundsSmallAndLargeRequests) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(CachingAllocator::RoundSize(5u << 20), 6u << 20);
}

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameRoundedSize) {
  int live = 0;
  CachingAllocator cache(std::make_unique<FakeRawAllocator>(1u << 30, &live), Device::Cuda(0));
  void* a = cache.Allocate(1000);
  cache.Deallocate(a, 1000);
  void* b = cache.Allocate(900);  // same 1024-byte class: the cached block comes back
  EXPECT_EQ(a, b);
  EXPECT_EQ(cache.stats().num_raw_allocations, 1);
  void* c = cache.Allocate(5000);  // another class: a new raw allocation
  EXPECT_NE(c, b);
  EXPECT_EQ(cache.stats().num_raw_allocations, 2);
  EXPECT_EQ(cache.stats().bytes_in_use, 1024u + 5120u);
  EXPECT_EQ(cache.stats().peak_bytes_in_use, 1024u + 5120u);
  cache.Deallocate(b, 900);
  cache.Deallocate(c, 5000);
  EXPECT_EQ(cache.stats().bytes_in_use, 0u);
  EXPECT_EQ(cache.stats().bytes_reserved, 1024u + 5120u);
  EXPECT_EQ(live, 2);
  cache.EmptyCache();
  EXPECT_EQ(cache.stats().bytes_reserved, 0u);
  EXPECT_EQ(live, 0);
}

TEST(CachingAllocator, ReleasesItsCacheAndRetriesWhenTheDeviceIsFull) {
  int live = 0;
  CachingAllocator cache(std::make_unique<FakeRawAllocator>(4u << 20, &live), Device::Cuda(0));
  void* a = cache.Allocate(3u << 20);  // 4 MiB class fills the fake device
  cache.Deallocate(a, 3u << 20);       // cached, still reserved
  void* b = cache.Allocate(1u << 10);  // needs fresh memory: cache released, retry succeeds
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(cache.stats().bytes_reserved, 1024u);
  cache.Deallocate(b, 1u << 10);
}

TEST(CachingAllocatorDeathTest, OutOfMemoryNamesTheRequestAndWhatToDo) {
  int live = 0;
  CachingAllocator cache(std::make_unique<FakeRawAllocator>(1u << 20, &live), Device::Cuda(3));
  EXPECT_DEATH(cache.Allocate(3u << 20),
               "out of memory on cuda:3: requested 3.00 MiB.*Reduce the micro-batch");
}

TEST(CachingAllocatorDeathTest, FreeingAForeignPointerIsCaught) {
  int live = 0;
  CachingAllocator cache(std::make_unique<FakeRawAllocator>(1u << 20, &live), Device::Cuda(0));
  int not_ours = 0;
  EXPECT_DEATH(cache.Deallocate(&not_ours, 4), "which this allocator did not hand out on cuda:0");
}

TEST(FormatBytes, HumanReadable) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(size_t{3} << 30), "3.00 GiB");
}

TEST(CudaCachingAllocator, AllocatesReusesAndAccountsOnTheDevice) {
  if (!CudaAvailable()) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  Allocator& cuda = CudaAllocator(0);
  const AllocatorStats before = cuda.stats();
  void* p = cuda.Allocate(12345);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(cuda.stats().bytes_in_use, before.bytes_in_use + CachingAllocator::RoundSize(12345));
  cuda.Deallocate(p, 12345);
  void* q = cuda.Allocate(12345);
  EXPECT_EQ(p, q);
  cuda.Deallocate(q, 12345);
}

}  // namespace
}  // namespace kelvin
