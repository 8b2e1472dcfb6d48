// The CPU caching allocator and the per-thread override used by capture.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "encore/encore.h"
#include "src/core/allocator.h"

namespace encore {
namespace {

TEST(AllocatorTest, FreedBlocksAreReusedWithoutNewReservations) {
  Allocator& a = default_allocator(kCPU);
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  a.deallocate(p, 1000);
  const int64_t reserved = allocator_stats(kCPU).reserved_bytes;
  void* q = a.allocate(990);                  // same 64-byte class
  EXPECT_EQ(q, p);
  EXPECT_EQ(allocator_stats(kCPU).reserved_bytes, reserved);
  a.deallocate(q, 990);
}

TEST(AllocatorTest, LargeRequestsRoundToAQuarterOfAPowerOfTwo) {
  Allocator& a = default_allocator(kCPU);
  const int64_t before = allocator_stats(kCPU).in_use_bytes;
  void* p = a.allocate(5000);                 // 4096 < 5000 <= 5120 = 5 * 1024
  EXPECT_EQ(allocator_stats(kCPU).in_use_bytes - before, 5120);
  a.deallocate(p, 5000);
  EXPECT_EQ(allocator_stats(kCPU).in_use_bytes, before);
}

// Found by fuzz/ops_fuzz: arange(0, 2^60) as i64 asked for 2^63 - 6 bytes,
// whose size class rounding overflowed int64.
TEST(AllocatorTest, RequestsNearTheInt64LimitAreRefusedNotRounded) {
  Allocator& a = default_allocator(kCPU);
  const int64_t before = allocator_stats(kCPU).in_use_bytes;
  for (int64_t n : {INT64_MAX, INT64_MAX - 5, (int64_t{1} << 62) + 1}) {
    try {
      a.allocate(n);
      FAIL() << n << " bytes allocated";
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted) << e.status();
    }
  }
  EXPECT_EQ(allocator_stats(kCPU).in_use_bytes, before);
  EXPECT_THROW((void)arange(0, int64_t{1} << 60, 1, kInt64), Error);
}

TEST(AllocatorTest, PeakTracksTheHighWaterMark) {
  reset_peak_stats(kCPU);
  const int64_t base = allocator_stats(kCPU).in_use_bytes;
  {
    Tensor a = empty({1 << 20});              // 4 MiB
    Tensor b = empty({1 << 20});
  }
  AllocatorStats s = allocator_stats(kCPU);
  EXPECT_EQ(s.in_use_bytes, base);
  EXPECT_EQ(s.peak_in_use_bytes - base, 2 * (4 << 20));
}

class CountingAllocator final : public Allocator {
 public:
  void* allocate(int64_t nbytes) override {
    ++count;
    return default_allocator(kCPU).allocate(nbytes);
  }
  void deallocate(void* p, int64_t nbytes) override { default_allocator(kCPU).deallocate(p, nbytes); }
  int count = 0;
};

TEST(AllocatorTest, OverrideRoutesThisThreadsAllocations) {
  CountingAllocator counting;
  {
    AllocatorOverride scope(kCPU, &counting);
    Tensor t = zeros({16});
    EXPECT_EQ(counting.count, 1);
  }
  Tensor u = zeros({16});
  EXPECT_EQ(counting.count, 1);
}

// One CUDA slot per thread: an override serves the CUDA device it was
// installed for, and a request for another one is refused, not routed there
// (no device is touched, so this runs without a GPU).
TEST(AllocatorTest, ACudaOverrideServesOnlyItsOwnDevice) {
  CountingAllocator counting;
  {
    AllocatorOverride scope(Device::cuda(0), &counting);
    EXPECT_EQ(&current_allocator(Device::cuda(0)), &counting);
    try {
      (void)current_allocator(Device::cuda(1));
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(std::string(e.what()).find("an allocation on cuda:1 while this thread's CUDA allocations are routed "
                                           "for cuda:0"), std::string::npos) << e.what();
    }
    {
      AllocatorOverride inner(Device::cuda(1), &counting);   // nested: cuda:1 now, restored after
      EXPECT_EQ(&current_allocator(Device::cuda(1)), &counting);
      EXPECT_THROW((void)current_allocator(Device::cuda(0)), Error);
    }
    EXPECT_EQ(&current_allocator(Device::cuda(0)), &counting);
  }
  EXPECT_EQ(&current_allocator(kCPU), &default_allocator(kCPU));
}

}  // namespace
}  // namespace encore
