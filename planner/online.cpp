// `online`: what a runtime allocator can do without knowing the future.
// Buffers are allocated and freed in time order; each allocation takes the
// smallest free gap that fits (best fit), freed gaps coalesce with their
// neighbours, and the arena grows only when no gap fits.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "encore/planner.h"
#include "planner/internal.h"

namespace encore::planner::internal {
namespace {

// NOTE [ Free list keyed by gap end ]
// Gaps are kept twice: by (size, start) for best fit, and by end for
// coalescing. Keyed by end, the common updates leave the key alone: taking
// the front of a gap moves its start, and a freed block that touches the
// gap above it moves that gap's start down, so both are in-place writes
// (keyed by start, each was an erase and an insert). B-trees hold a node per
// handful of gaps (std::map and std::set cost an allocation per gap). The
// plan is the one a free list keyed by start gives: same gaps, same order.
class FreeList {
 public:
  // Returns the offset of a new block of `size` bytes (size > 0).
  int64_t allocate(int64_t size, int64_t alignment) {
    for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
      const auto [gap_size, gap_start] = *it;
      const int64_t offset = align_up(gap_start, alignment);
      if (offset + size <= gap_start + gap_size) {
        by_size_.erase(it);
        take(gap_start, gap_start + gap_size, offset, size);
        return offset;
      }
    }
    // No gap fits: grow the arena, starting inside a free gap at its end.
    int64_t start = top_;
    if (auto last = by_end_.rbegin(); last != by_end_.rend() && last->first == top_) {
      start = last->second;
      by_size_.erase({top_ - start, start});
      by_end_.erase(top_);
    }
    const int64_t offset = align_up(start, alignment);
    if (offset > start) add_gap(start, offset);
    top_ = offset + size;
    return offset;
  }

  // Returns [offset, offset + size) to the free list, merged with neighbours.
  void release(int64_t offset, int64_t size) {
    const int64_t end = offset + size;
    auto it = by_end_.lower_bound(offset);  // the first gap ending at or above offset
    auto below = by_end_.end();
    if (it != by_end_.end() && it->first == offset) below = it++;
    const bool above = it != by_end_.end() && it->second == end;
    if (above) {
      const int64_t top = it->first;
      by_size_.erase({top - end, end});
      int64_t start = offset;
      if (below != by_end_.end()) {
        start = below->second;
        by_size_.erase({offset - start, start});
        it->second = start;
        by_end_.erase(below);  // invalidates `it`
      } else {
        it->second = start;
      }
      by_size_.emplace(top - start, start);
      return;
    }
    if (below != by_end_.end()) {  // extend the gap below: its key (end) moves up
      const int64_t start = below->second;
      by_size_.erase({offset - start, start});
      by_end_.erase(below);
      add_gap(start, end);
      return;
    }
    by_end_.emplace_hint(it, end, offset);
    by_size_.emplace(size, offset);
  }

  int64_t top() const { return top_; }

 private:
  // Takes [offset, offset + size) out of the gap [start, end), already gone
  // from by_size_.
  void take(int64_t start, int64_t end, int64_t offset, int64_t size) {
    auto it = by_end_.find(end);
    const int64_t rest = offset + size;
    if (rest < end) {
      it->second = rest;  // the part above stays under the same key
      by_size_.emplace(end - rest, rest);
    } else {
      it = by_end_.erase(it);
    }
    if (offset > start) {
      by_end_.emplace_hint(it, offset, start);
      by_size_.emplace(offset - start, start);
    }
  }
  void add_gap(int64_t start, int64_t end) {
    by_end_.emplace(end, start);
    by_size_.emplace(end - start, start);
  }

  absl::btree_map<int64_t, int64_t> by_end_;             // gap end -> gap start
  absl::btree_set<std::pair<int64_t, int64_t>> by_size_;  // (gap size, gap start)
  int64_t top_ = 0;                                       // high-water mark, bytes
};

}  // namespace

Plan plan_online(absl::Span<const Buffer> buffers) {
  return plan_online(buffers, time_ordered_events(buffers), nullptr);
}

// NOTE [ Cutting the first plan ]
// The clock is read every kEventsPerCheck events. Once the deadline has
// passed, the buffers not yet allocated are placed above the high-water
// mark of those that were, on a stack in time order: an allocation goes on
// top, and a freed buffer's bytes are reused once it and every buffer above
// it are freed (last in, first out, which nested lifetimes such as
// activations follow). That costs a few ns an event. Tail buffers overlap
// nothing placed before the cut (all of it lies below the mark) and live
// ones never share a stack position, so the plan is valid whatever the cut;
// Plan::stacked_by_limit counts the tail buffers.
Plan plan_online(absl::Span<const Buffer> buffers, absl::Span<const TimeEvent> events, const Deadline* deadline) {
  constexpr size_t kEventsPerCheck = 4096;
  Plan plan;
  plan.offsets.assign(buffers.size(), 0);
  FreeList free_list;
  size_t e = 0;
  for (; e < events.size(); ++e) {
    if (deadline != nullptr && e % kEventsPerCheck == 0 && e > 0 && deadline->expired()) break;
    const TimeEvent& event = events[e];
    const Buffer& b = buffers[event.index];
    if (event.is_alloc) {
      plan.offsets[event.index] = free_list.allocate(b.size, b.alignment);
    } else {
      free_list.release(plan.offsets[event.index], b.size);
    }
  }
  plan.peak = free_list.top();
  if (e == events.size()) return plan;
  const int64_t base = plan.peak;
  int64_t top = base;
  std::vector<char> in_tail(buffers.size(), 0), freed(buffers.size(), 0);
  std::vector<int32_t> stack;
  for (; e < events.size(); ++e) {
    const TimeEvent& event = events[e];
    const Buffer& b = buffers[event.index];
    if (event.is_alloc) {
      plan.offsets[event.index] = align_up(top, b.alignment);
      top = plan.offsets[event.index] + b.size;
      plan.peak = std::max(plan.peak, top);
      in_tail[event.index] = 1;
      stack.push_back(event.index);
      ++plan.stacked_by_limit;
      continue;
    }
    if (!in_tail[event.index]) continue;  // placed before the cut: its bytes stay taken
    freed[event.index] = 1;
    while (!stack.empty() && freed[stack.back()]) stack.pop_back();
    top = stack.empty() ? base : plan.offsets[stack.back()] + buffers[stack.back()].size;
  }
  return plan;
}

}  // namespace encore::planner::internal
