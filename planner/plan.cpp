// plan_buffers(): checks the input, runs the chosen algorithm, validates.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/radix.h"

namespace encore::planner {
namespace {

constexpr std::array<Algorithm, 7> kAlgorithms = {
    Algorithm::kNaive,      Algorithm::kCaching, Algorithm::kOnline, Algorithm::kGreedy,
    Algorithm::kBestGreedy, Algorithm::kExact,   Algorithm::kBest};
constexpr std::array<absl::string_view, 7> kNames = {"naive",       "caching", "online", "greedy",
                                                    "best_greedy", "exact",   "best"};

// NOTE [ What best does ]
// `best` starts from the online allocator's plan (cheap: 0.4 s for 10^6
// buffers), then adds greedy plans, one ordering after another (above
// kAllOrders buffers decreasing size only), each only if it can finish in
// the time left: greedy costs 15 to 30 times what the online walk took
// (10^5 buffers: 0.6-0.9 s against 30-45 ms, varying with the trace and the
// load; bench/RESULTS.md), so it is started when the time left is
// kGreedyOverOnline times that (a safe margin: a greedy run the limit cuts
// is lost, and with it the time repacking would have had), and a greedy run cut short would be time the
// next phase could have used. Then, with what is left, the exact search
// improves on the best plan (up to 8000 buffers) or the peak region is
// repacked (above). Whenever the limit hits, the best plan so far is
// returned. `exact` starts the same way.
constexpr size_t kAllOrders = 20'000;
constexpr int kGreedyOverOnline = 48;

bool good_enough(const Plan& plan, int64_t bound, int64_t capacity) {
  return plan.peak == bound || (capacity > 0 && plan.peak <= capacity);
}

// The online plan, then the greedy orderings that fit in the time left.
// The online walk stops at the deadline (NOTE [ Cutting the first plan ] in
// online.cpp); then nothing follows it.
Plan first_plan(absl::Span<const Buffer> buffers, absl::Span<const internal::TimeEvent> events, int64_t bound,
                const internal::Deadline& deadline, int64_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  Plan best = internal::plan_online(buffers, events, &deadline);
  const auto online_time = std::chrono::steady_clock::now() - start;
  if (best.stacked_by_limit > 0) return best;
  constexpr internal::GreedyOrder kOrders[] = {internal::GreedyOrder::kSize, internal::GreedyOrder::kLength,
                                               internal::GreedyOrder::kArea, internal::GreedyOrder::kStart};
  for (internal::GreedyOrder order : kOrders) {
    if (good_enough(best, bound, capacity) || deadline.remaining() < kGreedyOverOnline * online_time) break;
    std::optional<Plan> greedy = internal::plan_greedy_within(buffers, order, deadline);
    if (greedy && greedy->peak < best.peak) best = *std::move(greedy);
    if (buffers.size() > kAllOrders) break;
  }
  return best;
}

Plan plan_best(absl::Span<const Buffer> buffers, absl::Span<const internal::TimeEvent> events, int64_t bound,
               const internal::Deadline& deadline, int64_t capacity) {
  Plan best = first_plan(buffers, events, bound, deadline, capacity);
  if (good_enough(best, bound, capacity) || deadline.expired()) return best;
  if (buffers.size() > internal::kMaxExactItems) return internal::repack_peak(buffers, std::move(best), deadline);
  return internal::plan_exact(buffers, bound, std::move(best), deadline, capacity).plan;
}

Plan plan_exact_within(absl::Span<const Buffer> buffers, absl::Span<const internal::TimeEvent> events,
                       int64_t bound, const internal::Deadline& deadline, int64_t capacity) {
  Plan start = first_plan(buffers, events, bound, deadline, capacity);
  return internal::plan_exact(buffers, bound, std::move(start), deadline, capacity).plan;
}

// Every algorithm places each buffer at most its alignment slack above the
// buffers placed before it, so the sum of sizes plus slack bounds every
// offset + size; `caching` adds at most a segment's rounding per buffer. Kept
// under 2^62, no peak or offset can overflow int64. Problems above it would
// need exabytes: refused, naming the buffer where the sum crosses the limit.
absl::Status check_total(absl::Span<const Buffer> buffers) {
  constexpr int64_t kMaxTotal = int64_t{1} << 62;
  constexpr int64_t kCachingSlack = int64_t{1} << 26;  // above its largest rounding (20 MiB segments)
  __int128 total = 0;
  for (const Buffer& b : buffers) {
    if (b.size == 0) continue;
    total += static_cast<__int128>(b.size) + b.alignment - 1 + kCachingSlack;
    if (total > kMaxTotal) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "buffer '", b.id, "' (size ", b.size, ", alignment ", b.alignment,
          ") brings the bytes the buffers may need above 2^62; no plan's offsets would fit in int64"));
    }
  }
  return absl::OkStatus();
}

Plan run(absl::Span<const Buffer> buffers, absl::Span<const internal::TimeEvent> events, const PlanOptions& options,
         int64_t bound, const internal::Deadline& deadline) {
  switch (options.algorithm) {
    case Algorithm::kNaive: return internal::plan_naive(buffers);
    case Algorithm::kCaching: return internal::plan_caching(buffers);
    case Algorithm::kOnline: return internal::plan_online(buffers, events, nullptr);
    case Algorithm::kGreedy: return internal::plan_greedy(buffers, internal::GreedyOrder::kSize);
    case Algorithm::kBestGreedy: return internal::plan_best_greedy(buffers);
    case Algorithm::kExact: return plan_exact_within(buffers, events, bound, deadline, options.capacity);
    case Algorithm::kBest: return plan_best(buffers, events, bound, deadline, options.capacity);
  }
  return internal::plan_naive(buffers);
}

}  // namespace

absl::Span<const Algorithm> all_algorithms() { return kAlgorithms; }

absl::string_view algorithm_name(Algorithm algorithm) { return kNames[static_cast<int>(algorithm)]; }

absl::StatusOr<Algorithm> parse_algorithm(absl::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return kAlgorithms[i];
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown algorithm '", name, "' (known: ", absl::StrJoin(kNames, ", "), ")"));
}

// NOTE [ The time limit covers the whole call ]
// The deadline starts when plan_buffers is called, so checking the input
// and the lower bound count against it. Both and validation read one event
// order (time_ordered_events, a radix sort), as does the online plan. The
// deadline is brought forward by what validation will cost, estimated as
// kValidationOverSetup times what the checks, the event order and the bound
// took (measured 0.75-0.9 times as much at 10^6 buffers, 1.0-1.2 at 10^5;
// bench/planner/time_limit_bench and bench/RESULTS.md, issue 20, tenth pass),
// with room for a loaded machine, so that a plan validated after the
// deadline still returns within the limit. The online walk, the first plan, is cut at the
// deadline (NOTE [ Cutting the first plan ] in online.cpp); every later phase
// checks the clock (greedy every 512 placements, the search every
// 256 nodes, repacking every 256 placements and starting only rounds that fit:
// NOTE [ Rounds that fit ] in repack.cpp). So a call takes at most max(limit,
// checks + bound + validation) plus one step of a phase. tests/planner's
// TimeLimitTest holds every algorithm to that.
constexpr double kValidationOverSetup = 2;

absl::StatusOr<Plan> plan_buffers(absl::Span<const Buffer> buffers, const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status status = check_buffers(buffers); !status.ok()) return status;
  if (!(options.time_limit_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("time limit ", options.time_limit_s, " s is negative"));
  }
  if (absl::Status status = check_total(buffers); !status.ok()) return status;
  if (options.capacity < 0) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", options.capacity, " is negative"));
  }
  const std::vector<internal::TimeEvent> events = internal::time_ordered_events(buffers);
  const int64_t bound = internal::lower_bound_of(buffers, events);
  const auto setup = std::chrono::steady_clock::now() - start;
  using Duration = std::chrono::steady_clock::duration;
  const internal::Deadline deadline(
      start - std::chrono::duration_cast<Duration>(kValidationOverSetup * setup) +
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(std::min(options.time_limit_s, 1e9))));
  Plan plan = run(buffers, events, options, bound, deadline);
  plan.peak_floor = std::max(plan.peak_floor, bound);
  if (absl::Status status = internal::validate_with(buffers, plan, events); !status.ok()) {
    return absl::InternalError(absl::StrCat("algorithm '", algorithm_name(options.algorithm),
                                            "' produced an invalid plan: ", status.message()));
  }
  return plan;
}

namespace internal {

// Frees first, then allocations, each in index order; a stable radix sort
// by time then gives (time, free before allocation, index): the order a
// comparison sort by (time, is_alloc) that keeps index order would give.
std::vector<TimeEvent> time_ordered_events(absl::Span<const Buffer> buffers) {
  size_t non_empty = 0;
  for (const Buffer& b : buffers) non_empty += b.size != 0;
  std::vector<TimeEvent> events(2 * non_empty), scratch;
  size_t frees = 0, allocs = non_empty;
  for (int32_t i = 0; i < static_cast<int32_t>(buffers.size()); ++i) {
    if (buffers[i].size == 0) continue;  // takes no memory (PyTorch returns none for 0 bytes)
    events[frees++] = {buffers[i].upper, 0, i};
    events[allocs++] = {buffers[i].lower, 1, i};
  }
  radix_sort(events, scratch, [](const TimeEvent& e) { return ordered_key(e.time); });
  return events;
}

int64_t peak_of(absl::Span<const Buffer> buffers, absl::Span<const int64_t> offsets) {
  int64_t peak = 0;
  for (size_t i = 0; i < buffers.size(); ++i) peak = std::max(peak, offsets[i] + buffers[i].size);
  return peak;
}

Deadline::Deadline(double seconds)
    : end_(std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(std::min(seconds, 1e9)))) {}

int TimeSlots::slot_of(int64_t time) const {
  return static_cast<int>(std::lower_bound(times.begin(), times.end(), time) - times.begin());
}

TimeSlots make_time_slots(absl::Span<const Buffer> buffers) {
  TimeSlots slots;
  slots.times.reserve(2 * buffers.size());
  for (const Buffer& b : buffers) {
    slots.times.push_back(b.lower);
    slots.times.push_back(b.upper);
  }
  std::sort(slots.times.begin(), slots.times.end());
  slots.times.erase(std::unique(slots.times.begin(), slots.times.end()), slots.times.end());
  return slots;
}

// Every buffer its own slot, in input order: what no planning costs.
Plan plan_naive(absl::Span<const Buffer> buffers) {
  Plan plan;
  plan.offsets.reserve(buffers.size());
  int64_t top = 0;
  for (const Buffer& b : buffers) {
    if (b.size == 0) {
      plan.offsets.push_back(0);
      continue;
    }
    plan.offsets.push_back(align_up(top, b.alignment));
    top = plan.offsets.back() + b.size;
  }
  plan.peak = top;
  return plan;
}

}  // namespace internal
}  // namespace encore::planner
