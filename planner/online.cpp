// `online`: what a runtime allocator can do without knowing the future.
// Buffers are allocated and freed in time order; each allocation takes the
// smallest free gap that fits (best fit), freed gaps coalesce with their
// neighbours, and the arena grows only when no gap fits.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "encore/planner.h"
#include "planner/internal.h"

namespace encore::planner::internal {
namespace {

class FreeList {
 public:
  // Returns the offset of a new block of `size` bytes (size > 0).
  int64_t allocate(int64_t size, int64_t alignment) {
    for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
      const auto [gap_size, gap_offset] = *it;
      const int64_t offset = align_up(gap_offset, alignment);
      if (offset + size <= gap_offset + gap_size) return take(gap_offset, gap_size, offset, size);
    }
    // No gap fits: grow the arena, starting inside a free gap at its end.
    int64_t start = top_;
    if (auto last = by_offset_.rbegin(); last != by_offset_.rend() && last->first + last->second == top_) {
      start = last->first;
      erase_gap(last->first, last->second);
    }
    const int64_t offset = align_up(start, alignment);
    if (offset > start) add_gap(start, offset - start);
    top_ = offset + size;
    return offset;
  }

  // Returns [offset, offset + size) to the free list, merged with neighbours.
  void release(int64_t offset, int64_t size) {
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + size) {
      size += next->second;
      erase_gap(next->first, next->second);
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin() && (--prev)->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      erase_gap(prev->first, prev->second);
    }
    add_gap(offset, size);
  }

  int64_t top() const { return top_; }

 private:
  int64_t take(int64_t gap_offset, int64_t gap_size, int64_t offset, int64_t size) {
    erase_gap(gap_offset, gap_size);
    if (offset > gap_offset) add_gap(gap_offset, offset - gap_offset);
    if (offset + size < gap_offset + gap_size) add_gap(offset + size, gap_offset + gap_size - offset - size);
    return offset;
  }
  void add_gap(int64_t offset, int64_t size) {
    by_offset_.emplace(offset, size);
    by_size_.emplace(size, offset);
  }
  void erase_gap(int64_t offset, int64_t size) {
    by_offset_.erase(offset);
    by_size_.erase({size, offset});
  }

  std::map<int64_t, int64_t> by_offset_;         // gap offset -> gap size
  std::set<std::pair<int64_t, int64_t>> by_size_;  // (gap size, gap offset)
  int64_t top_ = 0;                               // high-water mark, bytes
};

}  // namespace

Plan plan_online(absl::Span<const Buffer> buffers) {
  const std::vector<TimeEvent> events = time_ordered_events(buffers);
  Plan plan;
  plan.offsets.assign(buffers.size(), 0);
  FreeList free_list;
  for (const TimeEvent& e : events) {
    const Buffer& b = buffers[e.index];
    if (e.is_alloc) {
      plan.offsets[e.index] = free_list.allocate(b.size, b.alignment);
    } else {
      free_list.release(plan.offsets[e.index], b.size);
    }
  }
  plan.peak = free_list.top();
  return plan;
}

}  // namespace encore::planner::internal
