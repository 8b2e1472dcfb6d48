// A best-fit caching allocator over large segments that a backend maps from
// its device (the CUDA backend: cudaMalloc / cudaFree): size classes, block
// splitting and merging, statistics. It makes no device call of its own, so
// its policy is tested on any machine (tests/core/block_cache_test.cpp) and
// the backend supplies only the two calls that need the device.
//
//   struct CudaSegments final : encore::SegmentSource { ... };   // cudaMalloc / cudaFree
//   CudaSegments segments;
//   encore::BlockCache cache(&segments, "cuda:0");
//   void* p = cache.allocate(1000);   // a 1024-byte block carved from a new 2 MiB segment
//   cache.deallocate(p);              // cached, merged with its free neighbours
//   cache.empty_cache();              // whole free segments go back to `segments`
//
// NOTE [ Block cache size classes ]: requests round up to 512 bytes. Small
// requests (up to 1 MiB) are carved from 2 MiB segments; large ones from
// segments of their size rounded up to 2 MiB. A free block is split when the
// remainder is at least 512 bytes (small pool) or more than 1 MiB (large
// pool), and merges with the free neighbours of its segment when freed, so the
// same memory serves differently sized requests over time. Best fit: the
// smallest free block that holds the request, lowest address among equals.
// When the source is out of memory, every whole free segment goes back to it
// and the request is tried once more before it fails.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/core/allocator.h"

namespace encore {

// Where a BlockCache gets its segments. Calls come with the cache's lock held.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // `bytes` (a multiple of 2 MiB) of memory aligned to at least 512 bytes, or
  // nullptr when the device is out of memory. Other failures throw.
  virtual void* map(int64_t bytes) = 0;
  // Gives back a segment that map(bytes) returned.
  virtual void unmap(void* segment, int64_t bytes) = 0;
};

class BlockCache {
 public:
  static constexpr int64_t kRound = 512;                     // bytes; also the blocks' alignment
  static constexpr int64_t kSmallLimit = int64_t{1} << 20;   // requests up to this come from the small pool
  static constexpr int64_t kSegment = int64_t{2} << 20;      // small segments; large ones round up to it
  static constexpr int64_t kMaxRequest = kMaxAllocationBytes;   // bytes; larger requests are out of memory at once

  // `source` outlives the cache; `name` (a device such as "cuda:0") starts
  // its error messages.
  BlockCache(SegmentSource* source, std::string name);
  // Gives every segment back to the source, live blocks or not (the CUDA
  // backend's caches are never destroyed; tests destroy theirs).
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of at least nbytes (<= 0 is served as 1), 512-byte aligned.
  // Throws encore::Error(kResourceExhausted) naming the request and the
  // cache's bytes when the source has no memory left even after the cache
  // gave its free segments back, and at once, without asking the source,
  // for more than kMaxRequest bytes.
  void* allocate(int64_t nbytes);
  // p came from allocate() of this cache and was not freed since; anything
  // else throws encore::Error(kInternal).
  void deallocate(void* p);

  // in_use counts whole blocks (a request rounded up, or the unsplit rest of
  // a block); reserved counts the segments held from the source.
  AllocatorStats stats() const;
  void reset_peak();
  // Gives whole free segments back to the source.
  void empty_cache();

  // Every segment with its blocks in address order (for tests and memory reports).
  struct BlockInfo {
    uintptr_t address;
    int64_t bytes;
    bool allocated;
  };
  struct SegmentInfo {
    uintptr_t address;
    int64_t bytes;
    bool small;   // from the small pool
    std::vector<BlockInfo> blocks;
  };
  std::vector<SegmentInfo> snapshot() const;

 private:
  struct Block {
    char* ptr;
    int64_t size;          // bytes
    bool small;            // from the small pool
    bool allocated = false;
    Block* prev = nullptr; // neighbours in the same segment, by address
    Block* next = nullptr;
  };
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  Block* take_best_fit(Pool& pool, int64_t size);
  Block* new_segment(int64_t bytes, bool small, int64_t requested);
  void split(Pool& pool, Block* b, int64_t size);
  static Block* absorb(Block* lo, Block* hi);
  void release_free_segments();

  SegmentSource* const source_;
  const std::string name_;
  mutable std::mutex mu_;
  Pool small_, large_;                          // free blocks
  absl::flat_hash_map<void*, Block*> live_;     // allocated blocks by address
  struct Segment {
    Block* head;                                // the block at the segment's start (never merged away)
    int64_t bytes;
  };
  std::map<char*, Segment> segments_;           // by start address
  AllocatorStats stats_;
};

}  // namespace encore
