// `caching`: a simulation of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp, default settings, one stream) replaying
// the lifetimes in time order. It is the figure users compare against.
//
// - Requests are rounded up to 512 bytes.
// - Requests up to 1 MiB come from the small pool, carved out of 2 MiB
//   segments; larger ones from the large pool, whose segments are 20 MiB for
//   requests under 10 MiB and the request rounded up to 2 MiB otherwise.
// - A request takes the smallest cached free block of its pool that fits
//   (best fit), split when the rest is worth keeping (>= 512 bytes in the
//   small pool, > 1 MiB in the large one). Freed blocks merge with free
//   neighbours in the same segment.
// - Memory is never returned to the system, so the peak is the total of all
//   reserved segments. Segments are laid out one after another in a virtual
//   address space; a buffer's offset is its segment base + offset in segment.
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "encore/planner.h"
#include "planner/internal.h"

namespace encore::planner::internal {
namespace {

constexpr int64_t kMinBlockSize = 512;              // rounding of every request
constexpr int64_t kSmallSize = int64_t{1} << 20;    // largest small-pool request
constexpr int64_t kSmallBuffer = int64_t{2} << 20;  // small-pool segment
constexpr int64_t kLargeBuffer = int64_t{20} << 20; // large-pool segment, requests < 10 MiB
constexpr int64_t kMinLargeAlloc = int64_t{10} << 20;
constexpr int64_t kRoundLarge = int64_t{2} << 20;   // rounding of big segments

constexpr int32_t kNone = -1;

struct Block {
  int64_t address;  // in the virtual address space, bytes
  int64_t size;     // bytes
  int32_t prev = kNone, next = kNone;  // neighbours in the same segment
  bool small_pool = false;
  bool allocated = false;
};

// A free block in a pool: ordered by size, then address, like PyTorch's
// BlockComparator, so the first entry not below a request is the best fit.
struct PoolEntry {
  int64_t size;
  int64_t address;
  int32_t id;
  bool operator<(const PoolEntry& o) const {
    return size != o.size ? size < o.size : address < o.address;
  }
};

class CachingAllocator {
 public:
  // Returns the block id serving a request of `size` bytes (size > 0).
  int32_t allocate(int64_t size) {
    size = size < kMinBlockSize ? kMinBlockSize : align_up(size, kMinBlockSize);
    const bool small = size <= kSmallSize;
    std::set<PoolEntry>& pool = small ? small_pool_ : large_pool_;
    int32_t id;
    if (auto it = pool.lower_bound({size, 0, 0}); it != pool.end()) {
      id = it->id;
      pool.erase(it);
    } else {
      id = new_segment(small ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer : align_up(size, kRoundLarge),
                       small);
    }
    const int64_t remaining = blocks_[id].size - size;
    if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) split(id, size);
    blocks_[id].allocated = true;
    return id;
  }

  void release(int32_t id) {
    blocks_[id].allocated = false;
    id = merge(id, blocks_[id].prev);
    id = merge(id, blocks_[id].next);
    pool_of(id).insert(entry(id));
  }

  int64_t address(int32_t id) const { return blocks_[id].address; }
  int64_t reserved() const { return reserved_; }

 private:
  int32_t new_segment(int64_t bytes, bool small) {
    blocks_.push_back({.address = reserved_, .size = bytes, .small_pool = small});
    reserved_ += bytes;
    return static_cast<int32_t>(blocks_.size() - 1);
  }
  // Keeps the first `size` bytes in block `id`; the rest becomes a free block.
  void split(int32_t id, int64_t size) {
    Block rest = blocks_[id];
    rest.address += size;
    rest.size -= size;
    rest.prev = id;
    const int32_t rest_id = static_cast<int32_t>(blocks_.size());
    if (rest.next != kNone) blocks_[rest.next].prev = rest_id;
    blocks_[id].next = rest_id;
    blocks_[id].size = size;
    blocks_.push_back(rest);
    pool_of(rest_id).insert(entry(rest_id));
  }
  // Merges `other`, a neighbour of `id`, into it if free; returns the survivor.
  int32_t merge(int32_t id, int32_t other) {
    if (other == kNone || blocks_[other].allocated) return id;
    pool_of(other).erase(entry(other));
    const int32_t low = blocks_[id].address < blocks_[other].address ? id : other;
    const int32_t high = low == id ? other : id;
    blocks_[low].size += blocks_[high].size;
    blocks_[low].next = blocks_[high].next;
    if (blocks_[high].next != kNone) blocks_[blocks_[high].next].prev = low;
    return low;
  }
  PoolEntry entry(int32_t id) const { return {blocks_[id].size, blocks_[id].address, id}; }
  std::set<PoolEntry>& pool_of(int32_t id) { return blocks_[id].small_pool ? small_pool_ : large_pool_; }

  std::vector<Block> blocks_;  // merged-away blocks stay as unused entries
  std::set<PoolEntry> small_pool_, large_pool_;  // free cached blocks
  int64_t reserved_ = 0;                         // bytes of all segments
};

}  // namespace

Plan plan_caching(absl::Span<const Buffer> buffers) {
  const std::vector<TimeEvent> events = time_ordered_events(buffers);
  Plan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<int32_t> block_of(buffers.size(), kNone);
  CachingAllocator allocator;
  for (const TimeEvent& e : events) {
    const Buffer& b = buffers[e.index];
    if (!e.is_alloc) {
      allocator.release(block_of[e.index]);
      continue;
    }
    // Blocks are 512-byte aligned; a larger alignment pads the request.
    const int64_t pad = b.alignment > kMinBlockSize ? b.alignment - kMinBlockSize : 0;
    block_of[e.index] = allocator.allocate(b.size + pad);
    plan.offsets[e.index] = align_up(allocator.address(block_of[e.index]), b.alignment);
  }
  plan.peak = allocator.reserved();
  return plan;
}

}  // namespace encore::planner::internal
