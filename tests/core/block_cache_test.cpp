// core's BlockCache (the CUDA backend's caching allocator policy) over a fake
// segment source that hands out address ranges and never touches them: size
// classes, best fit, splitting thresholds, merging, giving segments back,
// out-of-memory, misuse, and a long random run checked against the cache's
// invariants after every call. Runs on any machine.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "encore/error.h"
#include "src/core/block_cache.h"

namespace encore {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Address ranges from a counter (never dereferenced), up to `capacity` bytes
// mapped at once; records what is mapped.
class FakeSegments final : public SegmentSource {
 public:
  explicit FakeSegments(int64_t capacity = int64_t{1} << 40) : capacity_(capacity) {}

  void* map(int64_t bytes) override {
    EXPECT_EQ(bytes % BlockCache::kSegment, 0) << bytes;
    ++map_calls;
    if (mapped_bytes() + bytes > capacity_) return nullptr;
    const uintptr_t at = next_;
    next_ += static_cast<uintptr_t>(bytes) + BlockCache::kSegment;   // a gap: segments never touch
    mapped[at] = bytes;
    return reinterpret_cast<void*>(at);
  }
  void unmap(void* segment, int64_t bytes) override {
    auto it = mapped.find(reinterpret_cast<uintptr_t>(segment));
    ASSERT_NE(it, mapped.end()) << "unmapping " << segment << ", which is not mapped";
    EXPECT_EQ(it->second, bytes);
    mapped.erase(it);
  }
  int64_t mapped_bytes() const {
    int64_t n = 0;
    for (const auto& [at, bytes] : mapped) n += bytes;
    return n;
  }

  std::map<uintptr_t, int64_t> mapped;   // start -> bytes
  int map_calls = 0;

 private:
  int64_t capacity_;
  uintptr_t next_ = uintptr_t{1} << 32;
};

char* addr(void* p) { return static_cast<char*>(p); }

// Checks everything that must hold between calls: the segments are what the
// source mapped; blocks tile each segment in address order; no two free
// blocks are neighbours (they would have merged); the allocated blocks are
// exactly `live` (address -> requested bytes) and each holds its request;
// the statistics add up.
void expect_consistent(const BlockCache& cache, const FakeSegments& source, const std::map<uintptr_t, int64_t>& live) {
  const std::vector<BlockCache::SegmentInfo> segs = cache.snapshot();
  ASSERT_EQ(segs.size(), source.mapped.size());
  int64_t in_use = 0, reserved = 0;
  std::map<uintptr_t, int64_t> allocated;
  for (const BlockCache::SegmentInfo& s : segs) {
    ASSERT_EQ(source.mapped.count(s.address), 1u);
    EXPECT_EQ(source.mapped.at(s.address), s.bytes);
    reserved += s.bytes;
    uintptr_t at = s.address;
    bool prev_free = false;
    ASSERT_FALSE(s.blocks.empty());
    for (const BlockCache::BlockInfo& b : s.blocks) {
      EXPECT_EQ(b.address, at) << "blocks do not tile the segment";
      EXPECT_GT(b.bytes, 0);
      EXPECT_EQ(b.bytes % BlockCache::kRound, 0);
      EXPECT_FALSE(prev_free && !b.allocated) << "two free neighbours were not merged";
      prev_free = !b.allocated;
      if (b.allocated) {
        allocated[b.address] = b.bytes;
        in_use += b.bytes;
      }
      at += static_cast<uintptr_t>(b.bytes);
    }
    EXPECT_EQ(at, s.address + static_cast<uintptr_t>(s.bytes)) << "blocks do not cover the segment";
  }
  ASSERT_EQ(allocated.size(), live.size());
  for (const auto& [p, requested] : live) {
    ASSERT_EQ(allocated.count(p), 1u) << "a live block is missing";
    EXPECT_GE(allocated.at(p), requested);
  }
  const AllocatorStats st = cache.stats();
  EXPECT_EQ(st.in_use_bytes, in_use);
  EXPECT_EQ(st.reserved_bytes, reserved);
  EXPECT_GE(st.peak_in_use_bytes, st.in_use_bytes);
}

TEST(BlockCacheTest, SmallRequestsRoundTo512BytesAndShareOneSegment) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  char* a = addr(cache.allocate(1000));
  char* b = addr(cache.allocate(1));
  char* c = addr(cache.allocate(0));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % BlockCache::kRound, 0u);
  EXPECT_EQ(b, a + 1024);
  EXPECT_EQ(c, b + 512);
  EXPECT_EQ(source.map_calls, 1);
  EXPECT_EQ(cache.stats().in_use_bytes, 1024 + 512 + 512);
  EXPECT_EQ(cache.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(cache.stats().allocations, 3);
  expect_consistent(cache, source, {{uintptr_t(a), 1000}, {uintptr_t(b), 1}, {uintptr_t(c), 0}});
}

TEST(BlockCacheTest, FreedNeighboursMergeAndServeALargerRequest) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  char* x = addr(cache.allocate(4096));
  char* y = addr(cache.allocate(4096));
  char* z = addr(cache.allocate(4096));
  cache.deallocate(x);
  cache.deallocate(z);   // merges with the free rest of the segment above it
  cache.deallocate(y);   // merges with both
  expect_consistent(cache, source, {});
  ASSERT_EQ(cache.snapshot().at(0).blocks.size(), 1u);
  EXPECT_EQ(addr(cache.allocate(3 * 4096)), x);
  EXPECT_EQ(source.map_calls, 1);
}

TEST(BlockCacheTest, BestFitTakesTheSmallestFreeBlockThatHolds) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  std::vector<char*> p;
  for (int64_t kb : {8, 1, 4, 1, 16, 1}) p.push_back(addr(cache.allocate(kb * 1024)));
  cache.deallocate(p[0]);   // free holes of 8, 4 and 16 KiB, separated by live 1 KiB blocks
  cache.deallocate(p[2]);
  cache.deallocate(p[4]);
  EXPECT_EQ(addr(cache.allocate(3 * 1024)), p[2]);   // the 4 KiB hole, split
  EXPECT_EQ(addr(cache.allocate(5 * 1024)), p[0]);   // the 8 KiB hole
  EXPECT_EQ(addr(cache.allocate(12 * 1024)), p[4]);  // the 16 KiB hole
  EXPECT_EQ(source.map_calls, 1);
}

TEST(BlockCacheTest, LargeRequestsGetTheirOwnSegmentsAndSplitOnlyAboveOneMiB) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  void* a = cache.allocate(3 * kMiB / 2);   // 1.5 MiB: a 2 MiB segment, the 0.5 MiB rest not split off
  EXPECT_EQ(cache.stats().in_use_bytes, 2 * kMiB);
  EXPECT_EQ(source.mapped.size(), 1u);
  void* small = cache.allocate(512);        // small requests never come from large segments
  EXPECT_EQ(source.mapped.size(), 2u);
  cache.deallocate(a);
  cache.deallocate(small);
  void* big = cache.allocate(9 * kMiB);     // 10 MiB segment
  cache.deallocate(big);
  void* c = cache.allocate(3 * kMiB);       // best fit in the large pool: the 10 MiB block, split
  EXPECT_EQ(c, big);
  expect_consistent(cache, source, {{uintptr_t(c), 3 * kMiB}});
  const std::vector<BlockCache::SegmentInfo> segs = cache.snapshot();
  int splits = 0;
  for (const auto& s : segs) splits += static_cast<int>(s.blocks.size()) - 1;
  EXPECT_EQ(splits, 1);                     // only the 10 MiB segment: 3 MiB + 7 MiB
  cache.deallocate(c);
}

TEST(BlockCacheTest, EmptyCacheGivesBackWholeFreeSegmentsOnly) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  void* a = cache.allocate(4096);
  void* b = cache.allocate(4 * kMiB);
  void* c = cache.allocate(8 * kMiB);
  cache.deallocate(b);
  cache.empty_cache();                      // b's segment goes; a's (live) and c's (live) stay
  EXPECT_EQ(source.mapped.size(), 2u);
  EXPECT_EQ(cache.stats().reserved_bytes, 2 * kMiB + 8 * kMiB);
  cache.deallocate(a);
  cache.deallocate(c);
  cache.empty_cache();
  EXPECT_TRUE(source.mapped.empty());
  EXPECT_EQ(cache.stats().reserved_bytes, 0);
  EXPECT_EQ(cache.stats().in_use_bytes, 0);
}

TEST(BlockCacheTest, OutOfMemoryGivesFreeSegmentsBackRetriesThenFailsWithFigures) {
  FakeSegments source(/*capacity=*/16 * kMiB);
  BlockCache cache(&source, "cuda:0");
  void* a = cache.allocate(6 * kMiB);
  void* b = cache.allocate(6 * kMiB);
  cache.deallocate(b);                      // 6 MiB cached, 12 MiB mapped
  void* c = cache.allocate(8 * kMiB);       // does not fit beside 12 MiB: b's segment goes back first
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(source.mapped_bytes(), 14 * kMiB);
  try {
    cache.allocate(4 * kMiB);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0 allocator: out of memory allocating 4194304 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("14680064 bytes in use"), std::string::npos) << msg;
  }
  expect_consistent(cache, source, {{uintptr_t(a), 6 * kMiB}, {uintptr_t(c), 8 * kMiB}});
  cache.deallocate(a);
  cache.deallocate(c);
}

// Requests no device can hold are refused before any rounding: rounding
// up to 512 bytes or to a 2 MiB segment overflowed int64 within 2 MiB of
// 2^63 (a [2^61 - 1] f32 tensor asks for 2^63 - 4 bytes), and the wrapped,
// negative size was served a 2 MiB block from the small pool.
TEST(BlockCacheTest, RequestsBeyond2To62BytesAreOutOfMemoryWithoutRounding) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  for (int64_t nbytes : {INT64_MAX, INT64_MAX - 4, INT64_MAX - BlockCache::kSegment, (int64_t{1} << 62) + 1}) {
    SCOPED_TRACE(nbytes);
    try {
      void* p = cache.allocate(nbytes);
      ADD_FAILURE() << "served " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
      const std::string msg = e.what();
      EXPECT_NE(msg.find(absl::StrCat("cuda:0 allocator: out of memory allocating ", nbytes, " bytes")),
                std::string::npos) << msg;
    }
  }
  EXPECT_EQ(source.map_calls, 0);
  expect_consistent(cache, source, {});
}

TEST(BlockCacheTest, FreeingAForeignOrFreedPointerIsAnInternalError) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:3");
  void* p = cache.allocate(100);
  cache.deallocate(p);
  for (void* bad : {p, static_cast<void*>(addr(p) + 512)}) {
    try {
      cache.deallocate(bad);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
      EXPECT_NE(std::string(e.what()).find("cuda:3 allocator: freeing"), std::string::npos) << e.what();
    }
  }
  expect_consistent(cache, source, {});
}

TEST(BlockCacheTest, PeakFollowsTheHighestUseUntilReset) {
  FakeSegments source;
  BlockCache cache(&source, "cuda:0");
  void* a = cache.allocate(3 * kMiB);
  void* b = cache.allocate(5 * kMiB);
  cache.deallocate(b);
  EXPECT_EQ(cache.stats().peak_in_use_bytes, 4 * kMiB + 6 * kMiB);   // whole segments: rests of 1 MiB stay
  cache.reset_peak();
  EXPECT_EQ(cache.stats().peak_in_use_bytes, 4 * kMiB);   // 3 MiB rounds to a 4 MiB segment, unsplit
  cache.deallocate(a);
}

// A long random run of allocations and frees (small and large, of sizes that
// split and merge often), with occasional empty_cache, checked after every call.
TEST(BlockCacheTest, RandomRunKeepsEveryInvariant) {
  FakeSegments source(/*capacity=*/256 * kMiB);
  BlockCache cache(&source, "cuda:0");
  std::mt19937_64 rng(7);
  std::map<uintptr_t, int64_t> live;
  int ooms = 0;
  for (int step = 0; step < 4000; ++step) {
    const int action = static_cast<int>(rng() % 100);
    if (action < 55 || live.empty()) {
      int64_t n;
      switch (rng() % 4) {
        case 0: n = static_cast<int64_t>(rng() % 2048); break;                   // tiny
        case 1: n = static_cast<int64_t>(rng() % (kMiB + 1)); break;             // up to the small limit
        case 2: n = kMiB + 1 + static_cast<int64_t>(rng() % (4 * kMiB)); break;  // large
        default: n = static_cast<int64_t>(rng() % 40) * 512; break;              // exact multiples, 0 included
      }
      try {
        void* p = cache.allocate(n);
        ASSERT_EQ(live.count(uintptr_t(p)), 0u) << "handed out twice";
        live[uintptr_t(p)] = n;
      } catch (const Error& e) {
        ASSERT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
        ++ooms;
      }
    } else if (action < 98) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      cache.deallocate(reinterpret_cast<void*>(it->first));
      live.erase(it);
    } else {
      cache.empty_cache();
    }
    expect_consistent(cache, source, live);
    if (::testing::Test::HasFailure()) FAIL() << "at step " << step;
  }
  EXPECT_GT(ooms, 0) << "the run never reached the capacity: make it longer or the capacity smaller";
  for (const auto& [p, n] : live) cache.deallocate(reinterpret_cast<void*>(p));
  cache.empty_cache();
  EXPECT_TRUE(source.mapped.empty());
}

}  // namespace
}  // namespace encore
