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

namespace encore::planner {
namespace {

constexpr std::array<Algorithm, 7> kAlgorithms = {
    Algorithm::kNaive,      Algorithm::kCaching, Algorithm::kOnline, Algorithm::kGreedy,
    Algorithm::kBestGreedy, Algorithm::kExact,   Algorithm::kBest};
constexpr std::array<absl::string_view, 7> kNames = {"naive",       "caching", "online", "greedy",
                                                    "best_greedy", "exact",   "best"};

// NOTE [ What best does ]
// `best` starts from the online allocator's plan (cheap: 1.1 s for 10^6
// buffers), then adds greedy plans: up to kAlwaysGreedy buffers every
// ordering in turn, at least one, whatever the time limit (one costs at most
// about 0.2 s there); above it only decreasing size, and only if it can
// finish in time (12.7 s for 10^6 buffers). Then, with what is left of the time
// limit, the exact search improves on the best plan (up to 8000 buffers) or
// the peak region is repacked (above). Whenever the limit hits, the best
// plan so far is returned.
// Above it, greedy is only started when the time left is kGreedyOverOnline
// times what the online plan took: greedy by size costs 7 to 11 times as
// much (bench/RESULTS.md), and a greedy run cut short by the deadline is
// time the repacking could have used.
constexpr size_t kAlwaysGreedy = 20'000;
constexpr int kGreedyOverOnline = 12;

bool good_enough(const Plan& plan, int64_t bound, int64_t capacity) {
  return plan.peak == bound || (capacity > 0 && plan.peak <= capacity);
}

Plan plan_best(absl::Span<const Buffer> buffers, const internal::Deadline& deadline, int64_t capacity) {
  const int64_t bound = lower_bound(buffers);
  const auto start = std::chrono::steady_clock::now();
  Plan best = internal::plan_online(buffers);
  if (good_enough(best, bound, capacity)) return best;
  std::optional<Plan> greedy;
  if (buffers.size() <= kAlwaysGreedy) {
    greedy = internal::plan_greedy_until(buffers, &deadline);
  } else if (deadline.remaining() > kGreedyOverOnline * (std::chrono::steady_clock::now() - start)) {
    greedy = internal::plan_greedy_within(buffers, internal::GreedyOrder::kSize, deadline);
  }
  if (greedy && greedy->peak < best.peak) best = *std::move(greedy);
  if (good_enough(best, bound, capacity) || deadline.expired()) return best;
  if (buffers.size() > internal::kMaxExactItems) return internal::repack_peak(buffers, std::move(best), deadline);
  return internal::plan_exact(buffers, std::move(best), deadline, capacity).plan;
}

// `exact` starts from the greedy orderings that finish within the time limit
// (all four took 40 s on 10^6 buffers, one 17 s); when none does, from the
// online allocator's plan, which costs about a fifteenth of one ordering.
Plan plan_exact_within(absl::Span<const Buffer> buffers, const internal::Deadline& deadline, int64_t capacity) {
  std::optional<Plan> start = internal::plan_best_greedy_until(buffers, &deadline);
  if (!start) return internal::plan_online(buffers);
  return internal::plan_exact(buffers, *std::move(start), deadline, capacity).plan;
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

Plan run(absl::Span<const Buffer> buffers, const PlanOptions& options) {
  const internal::Deadline deadline(options.time_limit_s);
  switch (options.algorithm) {
    case Algorithm::kNaive: return internal::plan_naive(buffers);
    case Algorithm::kCaching: return internal::plan_caching(buffers);
    case Algorithm::kOnline: return internal::plan_online(buffers);
    case Algorithm::kGreedy: return internal::plan_greedy(buffers, internal::GreedyOrder::kSize);
    case Algorithm::kBestGreedy: return internal::plan_best_greedy(buffers);
    case Algorithm::kExact: return plan_exact_within(buffers, deadline, options.capacity);
    case Algorithm::kBest: return plan_best(buffers, deadline, options.capacity);
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

absl::StatusOr<Plan> plan_buffers(absl::Span<const Buffer> buffers, const PlanOptions& options) {
  if (absl::Status status = check_buffers(buffers); !status.ok()) return status;
  if (!(options.time_limit_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("time limit ", options.time_limit_s, " s is negative"));
  }
  if (absl::Status status = check_total(buffers); !status.ok()) return status;
  if (options.capacity < 0) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", options.capacity, " is negative"));
  }
  Plan plan = run(buffers, options);
  plan.peak_floor = std::max(plan.peak_floor, lower_bound(buffers));
  if (absl::Status status = validate(buffers, plan); !status.ok()) {
    return absl::InternalError(absl::StrCat("algorithm '", algorithm_name(options.algorithm),
                                            "' produced an invalid plan: ", status.message()));
  }
  return plan;
}

namespace internal {

std::vector<TimeEvent> time_ordered_events(absl::Span<const Buffer> buffers) {
  std::vector<TimeEvent> events;
  events.reserve(2 * buffers.size());
  for (int32_t i = 0; i < static_cast<int32_t>(buffers.size()); ++i) {
    if (buffers[i].size == 0) continue;  // takes no memory (PyTorch returns none for 0 bytes)
    events.push_back({buffers[i].lower, 1, i});
    events.push_back({buffers[i].upper, 0, i});
  }
  std::stable_sort(events.begin(), events.end(), [](const TimeEvent& a, const TimeEvent& b) {
    return a.time != b.time ? a.time < b.time : a.is_alloc < b.is_alloc;
  });
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
