// planner/occupancy.h — which addresses are taken during a span of time.
//
// Offline greedy places buffers one at a time; for each it needs the address
// ranges occupied at some time within its lifetime, to find a free gap. A scan
// over every placed buffer that overlaps in time costs O(n) per buffer (a
// long-lived activation overlaps almost everything), so instead:
//
// NOTE [ Occupancy tree ]
// A segment tree over time slots with lazy propagation. Node X keeps:
//   all(X):     the addresses taken at some slot under X, except ranges still
//               pending at an ancestor of X;
//   pending(X): ranges taken at every slot under X, not yet pushed down.
// A buffer's range goes into pending and all of the O(log n) nodes tiling its
// lifetime and into all of their ancestors. Before a query, the pending sets
// on the paths from the root to the query's end slots are pushed down, so the
// addresses taken during slots [lo, hi) are the union of all(C) over the
// O(log n) nodes C tiling [lo, hi). Sets merge touching ranges, so a tightly
// packed plan keeps them short, and a query reads a few short sets instead of
// every buffer overlapping it in time.
#ifndef ENCORE_PLANNER_OCCUPANCY_H_
#define ENCORE_PLANNER_OCCUPANCY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace encore::planner::internal {

// A half-open address range [begin, end), bytes.
struct Range {
  int64_t begin;
  int64_t end;
};

// Disjoint, non-touching ranges sorted by address. At most kMaxRanges: past
// that, the smallest holes between ranges are closed (marked taken). That is
// conservative, never invalid, and bounds the work of every query on sets
// fragmented by many scattered buffers.
class RangeSet {
 public:
  static constexpr size_t kMaxRanges = 64;

  void insert(Range range);  // merges with every range it overlaps or touches
  void insert(const RangeSet& other);
  void clear() { ranges_.clear(); }
  bool empty() const { return ranges_.empty(); }
  const std::vector<Range>& ranges() const { return ranges_; }

 private:
  void coarsen();

  std::vector<Range> ranges_;
};

class OccupancyTree {
 public:
  explicit OccupancyTree(int num_slots);

  // Marks `range` taken during time slots [lo, hi).
  void insert(int lo, int hi, Range range);

  // The lowest offset of the smallest free gap during slots [lo, hi) that
  // holds `size` bytes at a multiple of `alignment` (best fit); when no gap
  // does, the first aligned offset above everything taken then.
  int64_t best_fit(int lo, int hi, int64_t size, int64_t alignment);

 private:
  RangeSet& set(std::vector<int32_t>& ids, int node);
  void collect(const std::vector<int32_t>& ids, int node);
  template <typename Visit>
  void for_each_ancestor(int lo, int hi, Visit visit);

  int leaves_;                    // number of slots rounded up to a power of two
  std::vector<int32_t> cover_;    // node -> index into sets_, or -1
  std::vector<int32_t> all_;      // node -> index into sets_, or -1
  std::vector<RangeSet> sets_;
  struct Cursor {
    const Range* next;
    const Range* end;
  };
  std::vector<Cursor> cursors_;   // the sets best_fit reads, as a heap
};

}  // namespace encore::planner::internal

#endif  // ENCORE_PLANNER_OCCUPANCY_H_
