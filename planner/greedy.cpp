// `greedy` and `best_greedy`: offline placement one buffer at a time, each in
// the smallest free gap that holds it during its whole lifetime (best fit).
// Ordered by decreasing size this is the heuristic of TFLite's and XLA's
// memory planners. O(n log n) queries on the occupancy tree (occupancy.h).
#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <thread>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/occupancy.h"

namespace encore::planner::internal {
namespace {

std::vector<int32_t> greedy_order(absl::Span<const Buffer> buffers, GreedyOrder order) {
  std::vector<int32_t> indices(buffers.size());
  std::iota(indices.begin(), indices.end(), 0);
  auto length = [&](int32_t i) { return buffers[i].upper - buffers[i].lower; };
  auto area = [&](int32_t i) { return static_cast<__int128>(buffers[i].size) * length(i); };
  auto by_size = [&](int32_t a, int32_t b) {
    if (buffers[a].size != buffers[b].size) return buffers[a].size > buffers[b].size;
    return length(a) > length(b);
  };
  auto compare = [&](int32_t a, int32_t b) {
    switch (order) {
      case GreedyOrder::kSize: break;
      case GreedyOrder::kLength:
        if (length(a) != length(b)) return length(a) > length(b);
        break;
      case GreedyOrder::kArea:
        if (area(a) != area(b)) return area(a) > area(b);
        break;
      case GreedyOrder::kStart:
        if (buffers[a].lower != buffers[b].lower) return buffers[a].lower < buffers[b].lower;
        break;
    }
    return by_size(a, b);
  };
  std::stable_sort(indices.begin(), indices.end(), compare);
  return indices;
}

}  // namespace

Plan plan_greedy(absl::Span<const Buffer> buffers, GreedyOrder order) {
  const TimeSlots slots = make_time_slots(buffers);
  OccupancyTree occupancy(slots.num_slots());
  Plan plan;
  plan.offsets.assign(buffers.size(), 0);
  for (int32_t i : greedy_order(buffers, order)) {
    const Buffer& b = buffers[i];
    if (b.size == 0) continue;
    const int lo = slots.slot_of(b.lower), hi = slots.slot_of(b.upper);
    const int64_t offset = occupancy.best_fit(lo, hi, b.size, b.alignment);
    occupancy.insert(lo, hi, {offset, offset + b.size});
    plan.offsets[i] = offset;
    plan.peak = std::max(plan.peak, offset + b.size);
  }
  return plan;
}

namespace {

// The orderings best_greedy tries, most useful first.
constexpr GreedyOrder kOrders[] = {GreedyOrder::kSize, GreedyOrder::kLength, GreedyOrder::kArea,
                                   GreedyOrder::kStart};
// From this many buffers on, best_greedy uses two threads.
constexpr size_t kParallelBuffers = 100'000;

void keep_better(Plan plan, Plan* best) {
  if (best->offsets.empty() || plan.peak < best->peak) *best = std::move(plan);
}

}  // namespace

Plan plan_best_greedy(absl::Span<const Buffer> buffers) {
  if (buffers.size() < kParallelBuffers) return plan_greedy_until(buffers, nullptr);
  // Two threads take the next ordering as they finish, slowest (area) first.
  constexpr GreedyOrder kByCost[] = {GreedyOrder::kArea, GreedyOrder::kSize, GreedyOrder::kStart,
                                     GreedyOrder::kLength};
  std::array<Plan, std::size(kByCost)> plans;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < plans.size(); k = next++) plans[k] = plan_greedy(buffers, kByCost[k]);
  };
  std::thread helper(work);
  work();
  helper.join();
  Plan best;
  for (Plan& plan : plans) keep_better(std::move(plan), &best);
  return best;
}

Plan plan_greedy_until(absl::Span<const Buffer> buffers, const Deadline* deadline) {
  Plan best;
  for (GreedyOrder order : kOrders) {
    if (deadline != nullptr && !best.offsets.empty() && deadline->expired()) break;
    keep_better(plan_greedy(buffers, order), &best);
  }
  return best;
}

}  // namespace encore::planner::internal
