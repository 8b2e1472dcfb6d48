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
#include <chrono>
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
      int64_t window = window_;
      if (!fits(window, deadline)) {
        window = largest_fitting_window(deadline);
        if (window < kSmallestWindow || window <= failed_window_) break;
      }
      const auto start = std::chrono::steady_clock::now();
      RoundStats stats;
      const bool better = repack_around(highest_buffer(), window, deadline, &stats);
      measure(window, stats, std::chrono::steady_clock::now() - start);
      failed_window_ = better ? 0 : std::max(failed_window_, window);
      if (window != window_ || better) continue;  // a window cut to fit leaves the schedule alone
      if (window_ >= n) break;
      window_ *= 2;
    }
    plan_.peak = peak_of(buffers_, plan_.offsets);
    return std::move(plan_);
  }

 private:
  struct RoundStats {
    std::chrono::steady_clock::duration scan{};  // the scan and the sort, before the first placement
    int64_t placed = 0;
  };

  // NOTE [ Rounds that fit ]
  // A round the deadline cuts gives nothing, and it still costs its scan,
  // the placements made and freeing its occupancy tree (80 ms at a window of
  // 640,000 buffers), all after the deadline. So a round starts only when
  // its estimated cost fits in the time left: the longest scan measured,
  // plus the window times the cost per placement (freeing included)
  // measured on the largest window so far, grown by kGrowthPerDoubling for
  // each doubling beyond it (measured 1.0-1.4), times kSafety. When the
  // next window of the schedule does not fit, the largest one that does is
  // tried around the highest buffer instead, if larger than every window
  // that gave nothing since the last improvement and at least kSmallestWindow.
  // Only rounds that placed at least half their window are measured: one
  // that stopped early spreads its scan and freeing over few placements.
  static constexpr double kSafety = 1.15;
  static constexpr double kGrowthPerDoubling = 1.15;
  static constexpr int64_t kSmallestWindow = 1'000;
  static constexpr int64_t kMinPlacementsMeasured = 256;  // fewer say little about a placement's cost

  double estimate_s(int64_t window) const {
    window = std::min(window, static_cast<int64_t>(buffers_.size()));  // no more buffers than that start in it
    double per_placement = per_placement_s_;
    for (int64_t w = std::max<int64_t>(measured_window_, 1); w < window; w *= 2) per_placement *= kGrowthPerDoubling;
    return kSafety * (scan_s_ + per_placement * static_cast<double>(window));
  }

  bool fits(int64_t window, const Deadline& deadline) const {
    return measured_window_ == 0 ||
           estimate_s(window) <= std::chrono::duration<double>(deadline.remaining()).count();
  }

  int64_t largest_fitting_window(const Deadline& deadline) const {
    if (measured_window_ == 0) return 0;
    const double left = std::chrono::duration<double>(deadline.remaining()).count() / kSafety - scan_s_;
    if (left <= 0) return 0;
    int64_t window = std::min(window_, static_cast<int64_t>(left / per_placement_s_));
    while (window > measured_window_ && !fits(window, deadline)) window -= window / 8 + 1;
    return window;
  }

  void measure(int64_t window, const RoundStats& stats, std::chrono::steady_clock::duration took) {
    const double scan = std::chrono::duration<double>(stats.scan).count();
    scan_s_ = std::max(scan_s_, scan);
    if (stats.placed < std::max(kMinPlacementsMeasured, window / 2)) return;
    const double per_placement =
        std::chrono::duration<double>(took - stats.scan).count() / static_cast<double>(stats.placed);
    if (window > measured_window_) {
      measured_window_ = window;
      per_placement_s_ = per_placement;
    } else {
      per_placement_s_ = std::max(per_placement_s_, per_placement);
    }
  }

  int32_t highest_buffer() const {
    int32_t best = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(buffers_.size()); ++i) {
      if (plan_.offsets[i] + buffers_[i].size > plan_.offsets[best] + buffers_[best].size) best = i;
    }
    return best;
  }

  // The window [begin, end) of time: buffers by lower end around `center`.
  void choose_window(int32_t center, int64_t window, int64_t* begin, int64_t* end) const {
    const auto at = std::lower_bound(by_lower_.begin(), by_lower_.end(), buffers_[center].lower,
                                     [&](int32_t i, int64_t t) { return buffers_[i].lower < t; });
    const int64_t k = at - by_lower_.begin(), n = static_cast<int64_t>(by_lower_.size());
    const int64_t first = std::max<int64_t>(0, k - window / 2);
    const int64_t last = std::min<int64_t>(n - 1, first + window - 1);
    *begin = std::min(buffers_[by_lower_[first]].lower, buffers_[center].lower);
    *end = std::max(buffers_[by_lower_[last]].lower, buffers_[center].upper);
  }

  // Re-places the buffers inside a window around `center`; true if the
  // window's highest top went down (the plan then changed), false also when
  // the deadline passed first.
  bool repack_around(int32_t center, int64_t window, const Deadline& deadline, RoundStats* stats) {
    const auto start = std::chrono::steady_clock::now();
    int64_t begin = 0, end = 0;
    choose_window(center, window, &begin, &end);
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
    const auto placing = std::chrono::steady_clock::now();
    stats->scan = placing - start;
    std::vector<int64_t> offsets(inner.size());
    int64_t new_top = 0;
    for (size_t k = 0; k < inner.size(); ++k) {
      stats->placed = static_cast<int64_t>(k) + 1;
      const Buffer& b = buffers_[inner[k]];
      const int lo = slots_.slot_of(b.lower) - lo_slot, hi = slots_.slot_of(b.upper) - lo_slot;
      offsets[k] = occupancy.best_fit(lo, hi, b.size, b.alignment);
      occupancy.insert(lo, hi, {offsets[k], offsets[k] + b.size});
      new_top = std::max(new_top, offsets[k] + b.size);
      if (new_top >= old_top) return false;  // no better here: keep the plan
      // Every 256 placements (~1-3 ms); stopping early enough to free the
      // tree (a few % of the time placing) by the deadline.
      if (k % 256 == 255 && deadline.remaining() < (std::chrono::steady_clock::now() - placing) / 16) return false;
    }
    for (size_t k = 0; k < inner.size(); ++k) plan_.offsets[inner[k]] = offsets[k];
    return true;
  }

  absl::Span<const Buffer> buffers_;
  Plan plan_;
  const TimeSlots slots_;
  std::vector<int32_t> by_lower_;  // buffer indices by lower end
  int64_t window_ = kFirstWindow;  // buffers starting in the window
  // What rounds cost (NOTE [ Rounds that fit ]); measured_window_ 0: nothing yet.
  double scan_s_ = 0, per_placement_s_ = 0;
  int64_t measured_window_ = 0;
  int64_t failed_window_ = 0;  // the largest window that gave nothing since the last improvement
};

}  // namespace

Plan repack_peak(absl::Span<const Buffer> buffers, Plan start, const Deadline& deadline) {
  if (buffers.empty()) return start;
  Repacker repacker(buffers, std::move(start));  // two sorts: 0.3 s at 10^6 buffers
  return repacker.run(deadline);
}

}  // namespace encore::planner::internal
