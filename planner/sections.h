// planner/sections.h — the time structure the exact search reasons about.
//
// NOTE [ Sections ]
// A section is the set of buffers live just before some buffer ends, taken
// only when a buffer started since the previous section (otherwise it is a
// subset of that one). Sections are numbered in time order and each buffer is
// live in a contiguous run of them, [first, last). Two buffers overlap in time
// exactly when their runs intersect, and the buffers of one section must be
// stacked on top of each other, so a section whose unplaced bytes no longer
// fit under the capacity proves a partial plan hopeless. Where no buffer spans
// from section s to s + 1 (a zero "cut"), the problem splits in two.
#ifndef ENCORE_PLANNER_SECTIONS_H_
#define ENCORE_PLANNER_SECTIONS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "encore/planner.h"

namespace encore::planner::internal {

struct SearchItem {
  int32_t buffer;     // index into the input buffers
  int64_t size;       // bytes, > 0
  int64_t alignment;  // bytes
  uint64_t width;     // lifetime length, time steps (may exceed INT64_MAX)
  int32_t first;      // first section it is live in
  int32_t last;       // one past the last section
};

struct SectionProblem {
  std::vector<SearchItem> items;                // the non-empty buffers
  std::vector<std::vector<int32_t>> overlaps;   // item -> items overlapping in time
  std::vector<std::vector<int32_t>> members;    // section -> items live in it
  std::vector<int64_t> totals;                  // section -> bytes of its items
  std::vector<int32_t> cuts;                    // s -> items live in both s and s + 1
  int64_t grain = 1;  // every canonical offset and peak is a multiple (NOTE [ Grain ] in sections.cpp)
};

// The largest g such that every canonical plan of `items` has all offsets and
// tops multiples of g: the gcd of the sizes, lowered by alignments that
// neither divide it nor are multiples of it. 1 when there are no items.
int64_t section_grain(absl::Span<const SearchItem> items);

// Builds the sections of `buffers`, or nothing when the problem has more than
// `max_pairs` pairs of buffers overlapping in time, or more than that many
// (buffer, section) memberships: the search would need too much memory and
// time, and callers keep a heuristic plan.
std::optional<SectionProblem> make_section_problem(absl::Span<const Buffer> buffers, int64_t max_pairs);

}  // namespace encore::planner::internal

#endif  // ENCORE_PLANNER_SECTIONS_H_
