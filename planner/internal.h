// planner/internal.h — what the planner's source files share; not installed.
//
// Each algorithm is a function from buffers to a Plan. The inputs have
// already passed check_buffers (sizes >= 0, lower < upper, power-of-two
// alignments), and every algorithm places a zero-size buffer at offset 0.
#ifndef ENCORE_PLANNER_INTERNAL_H_
#define ENCORE_PLANNER_INTERNAL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "encore/planner.h"

namespace encore::planner::internal {

// Rounds `value` up to a multiple of `alignment` (a power of two).
inline int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

// hi - lo for lo <= hi, exact even when the difference does not fit in
// int64 (lo = INT64_MIN, hi = INT64_MAX gives 2^64 - 1).
inline uint64_t difference(int64_t lo, int64_t hi) { return static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo); }

// upper - lower, exact for every valid buffer (upper > lower).
inline uint64_t lifetime_length(const Buffer& b) { return difference(b.lower, b.upper); }

// The largest offset + size of a placement (0 for no buffers).
int64_t peak_of(absl::Span<const Buffer> buffers, absl::Span<const int64_t> offsets);

// An allocation or free of one buffer, for the allocators that replay
// lifetimes in time order (caching, online).
struct TimeEvent {
  int64_t time;
  int is_alloc;    // 0 = free, 1 = allocation: frees at a time step come first
  int32_t index;   // into the buffers
};
// Every non-empty buffer's allocation and free, sorted by time, frees
// before allocations at equal times, then by index (a radix sort).
std::vector<TimeEvent> time_ordered_events(absl::Span<const Buffer> buffers);
// lower_bound() and validate() on events = time_ordered_events(buffers), so
// that plan_buffers sorts once for the bound, the first plan and validation.
int64_t lower_bound_of(absl::Span<const Buffer> buffers, absl::Span<const TimeEvent> events);
absl::Status validate_with(absl::Span<const Buffer> buffers, const Plan& plan, absl::Span<const TimeEvent> events);

// A wall-clock deadline for the searching algorithms.
class Deadline {
 public:
  explicit Deadline(double seconds);  // from now
  explicit Deadline(std::chrono::steady_clock::time_point end) : end_(end) {}
  bool expired() const { return std::chrono::steady_clock::now() >= end_; }
  std::chrono::steady_clock::duration remaining() const { return end_ - std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point end_;
};

// Sorted distinct time points of all lower and upper ends. A buffer covers
// the time slots [slot_of(lower), slot_of(upper)) where slot k is the time
// interval [times[k], times[k + 1]).
struct TimeSlots {
  std::vector<int64_t> times;
  int slot_of(int64_t time) const;  // index of `time` in `times`
  int num_slots() const { return times.empty() ? 0 : static_cast<int>(times.size()) - 1; }
};
TimeSlots make_time_slots(absl::Span<const Buffer> buffers);

// What is wrong with one buffer ("negative size -4"), or "" if nothing.
// Duplicate ids are the caller's business.
std::string buffer_problem(const Buffer& buffer);

// ---- the algorithms (see Algorithm in encore/planner.h) --------------------

Plan plan_naive(absl::Span<const Buffer> buffers);
Plan plan_caching(absl::Span<const Buffer> buffers);
Plan plan_online(absl::Span<const Buffer> buffers);
// The same on events = time_ordered_events(buffers). With a deadline, the
// walk stops once it passes and the buffers not yet reached are stacked
// above the rest (NOTE [ Cutting the first plan ] in online.cpp).
Plan plan_online(absl::Span<const Buffer> buffers, absl::Span<const TimeEvent> events, const Deadline* deadline);

// The orderings greedy can place buffers in; ties fall back to size, then
// to the buffer index, so every ordering is deterministic.
enum class GreedyOrder {
  kSize,    // decreasing size (the TFLite / XLA heuristic)
  kLength,  // decreasing lifetime length
  kArea,    // decreasing size * lifetime length
  kStart,   // increasing lower end
};
Plan plan_greedy(absl::Span<const Buffer> buffers, GreedyOrder order);
// The same, or nothing if `deadline` passes first.
std::optional<Plan> plan_greedy_within(absl::Span<const Buffer> buffers, GreedyOrder order, const Deadline& deadline);
// The best plan of all orderings (on two threads for large inputs).
Plan plan_best_greedy(absl::Span<const Buffer> buffers);
// The same within `deadline` (if any): an ordering still running when it
// passes is dropped and none is started after it; nothing if no ordering
// finished in time. With time to spare it equals plan_best_greedy.
std::optional<Plan> plan_best_greedy_until(absl::Span<const Buffer> buffers, const Deadline* deadline);

// Improves on `start` (a valid plan) by re-placing the buffers of time
// windows around its highest buffers until the deadline (NOTE [ Repacking
// the peak region ] in repack.cpp). Never returns a higher peak.
Plan repack_peak(absl::Span<const Buffer> buffers, Plan start, const Deadline& deadline);

// plan_exact keeps the start plan beyond this many buffers: the search
// recurses once per placed buffer, about 250 bytes of stack each, so this
// keeps it within 2 MiB.
constexpr size_t kMaxExactItems = 8'000;

// What plan_exact found: the best plan (its peak_floor set to the proven
// floor) and how many search nodes it took.
struct ExactResult {
  Plan plan;
  int64_t nodes = 0;
  int64_t deadlines = 0;  // buffer tops bounded by a section (NOTE [ Deadlines ] in exact.cpp)
  int64_t repair_steps = 0;  // band repair searches (NOTE [ Band repair ] in exact.cpp)
  bool repaired = false;     // the plan returned is one band repair found
};
// Improves on `start` (a valid plan) by searching canonical placements
// (NOTE [ Canonical search ] in exact.cpp) until the deadline. With
// `capacity` 0 it minimises the peak: it stops once the peak is proven
// optimal. With a capacity it stops at the first plan within it or at a proof
// that none exists (then plan.peak_floor > capacity).
// `bound` is lower_bound(buffers). The deadline is checked before each phase
// (sections, every probe, every band repair step) and every 256 search nodes.
// `first_node_limit` (0: twice the buffers, at least 64) is the first round's
// node limit per search; tests set 1 so that every probe runs out of nodes
// and band repair runs in every round.
ExactResult plan_exact(absl::Span<const Buffer> buffers, int64_t bound, Plan start, const Deadline& deadline,
                       int64_t capacity, int64_t first_node_limit = 0);

}  // namespace encore::planner::internal

#endif  // ENCORE_PLANNER_INTERNAL_H_
