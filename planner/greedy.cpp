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
#include <optional>
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
  // Lifetime lengths in uint64: upper - lower of [INT64_MIN, INT64_MAX) does
  // not fit in int64, but upper > lower makes the unsigned difference exact.
  auto length = [&](int32_t i) { return lifetime_length(buffers[i]); };
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

namespace {

// From this many placements on, greedy checks the clock every so often.
constexpr int kPlacementsPerClockCheck = 512;  // 2-10 µs each: 1-5 ms between checks

// Places the buffers in `order`; false, leaving *out alone, if `deadline`
// (if any) passes first.
bool greedy_within(absl::Span<const Buffer> buffers, GreedyOrder order, const Deadline* deadline, Plan* out) {
  // The sorts below are O(n log n) too: check the clock after each.
  auto expired = [&] { return deadline != nullptr && deadline->expired(); };
  const TimeSlots slots = make_time_slots(buffers);
  if (expired()) return false;
  const std::vector<int32_t> indices = greedy_order(buffers, order);
  if (expired()) return false;
  OccupancyTree occupancy(slots.num_slots());
  Plan plan;
  plan.offsets.assign(buffers.size(), 0);
  int placed = 0;
  for (int32_t i : indices) {
    if (++placed % kPlacementsPerClockCheck == 0 && expired()) return false;
    const Buffer& b = buffers[i];
    if (b.size == 0) continue;
    const int lo = slots.slot_of(b.lower), hi = slots.slot_of(b.upper);
    const int64_t offset = occupancy.best_fit(lo, hi, b.size, b.alignment);
    occupancy.insert(lo, hi, {offset, offset + b.size});
    plan.offsets[i] = offset;
    plan.peak = std::max(plan.peak, offset + b.size);
  }
  *out = std::move(plan);
  return true;
}

}  // namespace

std::optional<Plan> plan_greedy_within(absl::Span<const Buffer> buffers, GreedyOrder order, const Deadline& deadline) {
  Plan plan;
  if (!greedy_within(buffers, order, &deadline, &plan)) return std::nullopt;
  return plan;
}

Plan plan_greedy(absl::Span<const Buffer> buffers, GreedyOrder order) {
  Plan plan;
  greedy_within(buffers, order, nullptr, &plan);
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

Plan plan_best_greedy(absl::Span<const Buffer> buffers) { return *plan_best_greedy_until(buffers, nullptr); }

std::optional<Plan> plan_best_greedy_until(absl::Span<const Buffer> buffers, const Deadline* deadline) {
  if (buffers.empty()) return Plan{};
  if (buffers.size() < kParallelBuffers) {
    Plan best;
    for (GreedyOrder order : kOrders) {
      if (deadline != nullptr && deadline->expired()) break;
      Plan plan;
      if (greedy_within(buffers, order, deadline, &plan)) keep_better(std::move(plan), &best);
    }
    if (best.offsets.empty()) return std::nullopt;
    return best;
  }
  // Two threads take the next ordering as they finish, slowest (area) first.
  constexpr GreedyOrder kByCost[] = {GreedyOrder::kArea, GreedyOrder::kSize, GreedyOrder::kStart,
                                     GreedyOrder::kLength};
  std::array<Plan, std::size(kByCost)> plans;  // empty offsets: not made in time
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < plans.size(); k = next++) {
      if (deadline != nullptr && deadline->expired()) break;
      greedy_within(buffers, kByCost[k], deadline, &plans[k]);
    }
  };
  std::thread helper(work);
  work();
  helper.join();
  Plan best;
  for (Plan& plan : plans) {
    if (!plan.offsets.empty()) keep_better(std::move(plan), &best);
  }
  if (best.offsets.empty()) return std::nullopt;
  return best;
}

}  // namespace encore::planner::internal
