// The improvement phase of `best` on large problems: repacking the peak
// region of a plan.
//
// NOTE [ Repacking the peak region ]
// A plan's peak is made by the buffers around one time step. Take a window
// of time around the buffer whose top is highest, in which kFirstWindow
// buffers start (twice as many after a window that gave nothing); keep
// every other buffer where it is (those that cross into the window become
// obstacles there) and place the inner ones
// again by greedy best fit in decreasing size, in the occupancy tree of the
// window's time slots. Outside the window nothing moves, so the new plan is
// valid; it is kept when the window's highest top went down. Then the next
// highest buffer is treated the same way, until the deadline, until a
// window of every buffer gives nothing, or after kMaxRounds. Each round costs
// O(n + w log w) for a window of w buffers; memory is linear.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/occupancy.h"

namespace encore::planner::internal {
namespace {

constexpr int64_t kFirstWindow = 10'000;  // buffers; doubled when a window gives nothing
constexpr int kMaxRounds = 64;

class Repacker {
 public:
  Repacker(absl::Span<const Buffer> buffers, Plan plan)
      : buffers_(buffers), plan_(std::move(plan)), slots_(make_time_slots(buffers)) {
    by_lower_.resize(buffers.size());
    std::iota(by_lower_.begin(), by_lower_.end(), 0);
    std::sort(by_lower_.begin(), by_lower_.end(),
              [&](int32_t a, int32_t b) { return buffers[a].lower < buffers[b].lower; });
  }

  Plan run(const Deadline& deadline) {
    const int64_t n = static_cast<int64_t>(buffers_.size());
    for (int round = 0; round < kMaxRounds && !deadline.expired(); ++round) {
      if (repack_around(highest_buffer(), deadline)) continue;
      if (window_ >= n) break;
      window_ *= 2;
    }
    plan_.peak = peak_of(buffers_, plan_.offsets);
    return std::move(plan_);
  }

 private:
  int32_t highest_buffer() const {
    int32_t best = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(buffers_.size()); ++i) {
      if (plan_.offsets[i] + buffers_[i].size > plan_.offsets[best] + buffers_[best].size) best = i;
    }
    return best;
  }

  // The window [begin, end) of time: buffers by lower end around `center`.
  void choose_window(int32_t center, int64_t* begin, int64_t* end) const {
    const auto at = std::lower_bound(by_lower_.begin(), by_lower_.end(), buffers_[center].lower,
                                     [&](int32_t i, int64_t t) { return buffers_[i].lower < t; });
    const int64_t k = at - by_lower_.begin(), n = static_cast<int64_t>(by_lower_.size());
    const int64_t first = std::max<int64_t>(0, k - window_ / 2);
    const int64_t last = std::min<int64_t>(n - 1, first + window_ - 1);
    *begin = std::min(buffers_[by_lower_[first]].lower, buffers_[center].lower);
    *end = std::max(buffers_[by_lower_[last]].lower, buffers_[center].upper);
  }

  // Re-places the buffers inside a window around `center`; true if the
  // window's highest top went down (the plan then changed), false also when
  // the deadline passed first.
  bool repack_around(int32_t center, const Deadline& deadline) {
    int64_t begin = 0, end = 0;
    choose_window(center, &begin, &end);
    const int lo_slot = slots_.slot_of(begin), hi_slot = slots_.slot_of(end);
    OccupancyTree occupancy(std::max(hi_slot - lo_slot, 1));
    std::vector<int32_t> inner;
    int64_t old_top = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(buffers_.size()); ++i) {
      const Buffer& b = buffers_[i];
      if (b.size == 0 || b.upper <= begin || end <= b.lower) continue;
      if (begin <= b.lower && b.upper <= end) {
        inner.push_back(i);
        old_top = std::max(old_top, plan_.offsets[i] + b.size);
        continue;
      }
      const int lo = std::max(slots_.slot_of(b.lower), lo_slot) - lo_slot;
      const int hi = std::min(slots_.slot_of(b.upper), hi_slot) - lo_slot;
      occupancy.insert(lo, hi, {plan_.offsets[i], plan_.offsets[i] + b.size});
    }
    std::stable_sort(inner.begin(), inner.end(), [&](int32_t a, int32_t b) {
      if (buffers_[a].size != buffers_[b].size) return buffers_[a].size > buffers_[b].size;
      return lifetime_length(buffers_[a]) > lifetime_length(buffers_[b]);
    });
    if (deadline.expired()) return false;  // the scan and the sort: O(n + w log w)
    std::vector<int64_t> offsets(inner.size());
    int64_t new_top = 0;
    for (size_t k = 0; k < inner.size(); ++k) {
      const Buffer& b = buffers_[inner[k]];
      const int lo = slots_.slot_of(b.lower) - lo_slot, hi = slots_.slot_of(b.upper) - lo_slot;
      offsets[k] = occupancy.best_fit(lo, hi, b.size, b.alignment);
      occupancy.insert(lo, hi, {offsets[k], offsets[k] + b.size});
      new_top = std::max(new_top, offsets[k] + b.size);
      if (new_top >= old_top) return false;  // no better here: keep the plan
      if (k % 256 == 255 && deadline.expired()) return false;  // 256 placements: ~1-3 ms
    }
    for (size_t k = 0; k < inner.size(); ++k) plan_.offsets[inner[k]] = offsets[k];
    return true;
  }

  absl::Span<const Buffer> buffers_;
  Plan plan_;
  const TimeSlots slots_;
  std::vector<int32_t> by_lower_;  // buffer indices by lower end
  int64_t window_ = kFirstWindow;  // buffers starting in the window
};

}  // namespace

Plan repack_peak(absl::Span<const Buffer> buffers, Plan start, const Deadline& deadline) {
  if (buffers.empty()) return start;
  Repacker repacker(buffers, std::move(start));  // two sorts: 0.3 s at 10^6 buffers
  return repacker.run(deadline);
}

}  // namespace encore::planner::internal
