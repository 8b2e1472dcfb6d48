// The CPU caching allocator and the per-thread override used by capture.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
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

// NOTE [ Measured peaks ]: a measurement (capture()'s warm-up peak) counts
// from its start, while the peak users read stays their high-water mark.
TEST(AllocatorTest, APeakMeasurementNeverLowersTheReportedPeak) {
  reset_peak_stats(kCPU);
  const int64_t base = allocator_stats(kCPU).in_use_bytes;
  { Tensor big = empty({1 << 20}); }   // 4 MiB: the user's high-water mark
  const int64_t user_peak = allocator_stats(kCPU).peak_in_use_bytes;
  ASSERT_EQ(user_peak - base, 4 << 20);
  PeakMeasurement m(kCPU);
  EXPECT_EQ(allocator_stats(kCPU).peak_in_use_bytes, user_peak);
  { Tensor small = empty({1 << 10}); }   // 4 KiB
  EXPECT_EQ(m.peak_above_start(), 4 << 10);
  EXPECT_EQ(allocator_stats(kCPU).peak_in_use_bytes, user_peak);
  {
    Tensor a = empty({1 << 20}), b = empty({1 << 20});   // 8 MiB: above the user's mark
  }
  EXPECT_EQ(m.peak_above_start(), 8 << 20);
  EXPECT_EQ(allocator_stats(kCPU).peak_in_use_bytes, base + (8 << 20));
  reset_peak_stats(kCPU);   // the user's reset starts over from what is in use
  EXPECT_EQ(allocator_stats(kCPU).peak_in_use_bytes, allocator_stats(kCPU).in_use_bytes);
}

#if defined(__SANITIZE_ADDRESS__)
#define ENCORE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENCORE_TEST_ASAN 1
#endif
#endif

// The system refuses a block while other size classes hold cached blocks:
// the allocator gives those back and asks again instead of throwing. Run in
// a child process under an address-space limit 256 MiB above its current
// size: three cached 64 MiB blocks and a new 128 MiB one do not fit at once.
TEST(AllocatorTest, ARefusedRequestEmptiesTheCacheAndTriesAgain) {
#ifdef ENCORE_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit allows";
#else
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    long pages = 0;
    FILE* statm = std::fopen("/proc/self/statm", "r");
    if (statm == nullptr || std::fscanf(statm, "%ld", &pages) != 1) _exit(10);
    std::fclose(statm);
    const rlim_t limit = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (rlim_t{256} << 20);
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(11);
    Allocator& a = default_allocator(kCPU);
    const int64_t block = int64_t{64} << 20;
    void* cached[3];
    try {
      for (void*& p : cached) p = a.allocate(block);
    } catch (const Error&) {
      _exit(12);   // the setup itself did not fit
    }
    for (void* p : cached) a.deallocate(p, block);
    try {
      void* big = a.allocate(2 * block);
      a.deallocate(big, 2 * block);
    } catch (const Error&) {
      _exit(13);   // refused although emptying the cache would have made room
    }
    const AllocatorStats after = allocator_stats(kCPU);   // cached now: only the 128 MiB block
    _exit(after.reserved_bytes == after.in_use_bytes + 2 * block ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10-12: setup failed; 13: refused; 14: the cache was not emptied";
#endif
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
