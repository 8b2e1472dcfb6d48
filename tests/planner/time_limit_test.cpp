// The time limit of `exact` and `best` covers the whole call (NOTE [ The
// time limit covers the whole call ] in planner/plan.cpp), and a limit that
// runs out during the first plan cuts it (NOTE [ Cutting the first plan ] in
// planner/online.cpp). No assertion here compares a time with a speed
// figure of this machine: the cut tests are exact (no time: the cut falls at
// the first clock check), the third compares with what the online plan
// costs on the same machine at the same moment, with generous slack; the
// last holds `best` to the limit it was given (the 1 s at 10^5
// buffers), which the planner keeps a margin for.
#include <chrono>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gtest/gtest.h"
#include "planner/internal.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// With no time the deadline has passed at the online walk's first clock
// check (after 4,096 events), so the walk is cut there, deterministically:
// buffers allocated before it keep the online plan's offsets, every later
// one is in the stacked tail, the count is reported, and the plan is valid.
// Problems of at most 2,048 buffers finish before the check: exactly the
// online plan. Small, middle and large sizes, both trace styles, random
// lifetimes (frees far out of last-in first-out order) and alignments.
TEST(TimeLimitTest, WithoutTimeTheFirstPlanIsCutValidAndFlagged) {
  const std::vector<std::vector<Buffer>> problems = {
      challenging_problem({.num_buffers = 200, .seed = 3}),
      training_step_trace({.num_buffers = 2'000, .seed = 7}),
      training_step_trace({.num_buffers = 5'000, .seed = 4}),
      training_step_trace({.num_buffers = 30'000, .seed = 5, .style = TraceStyle::kTransformer}),
      random_buffers(20'000, 5'000, 3'000, /*aligned=*/true, 8),
  };
  for (const std::vector<Buffer>& buffers : problems) {
    absl::StatusOr<Plan> online = plan_buffers(buffers, {.algorithm = Algorithm::kOnline});
    ASSERT_TRUE(online.ok()) << online.status();
    EXPECT_EQ(online->stacked_by_limit, 0);
    const std::vector<internal::TimeEvent> events = internal::time_ordered_events(buffers);
    constexpr size_t kCut = 4096;
    std::vector<char> before_cut(buffers.size(), 0);
    int64_t after_cut = 0;
    for (size_t e = 0; e < events.size(); ++e) {
      if (!events[e].is_alloc) continue;
      if (e < kCut) before_cut[events[e].index] = 1;
      after_cut += e >= kCut;
    }
    for (Algorithm algorithm : {Algorithm::kExact, Algorithm::kBest}) {
      absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 0});
      ASSERT_TRUE(plan.ok()) << plan.status();
      const std::string what = absl::StrCat(algorithm_name(algorithm), ", ", buffers.size(), " buffers");
      EXPECT_TRUE(validate(buffers, *plan).ok()) << what;
      EXPECT_EQ(plan->stacked_by_limit, after_cut) << what;
      if (after_cut == 0) {
        EXPECT_EQ(plan->offsets, online->offsets) << what;
      }
      int64_t below_tail = 0;  // the high-water mark of the buffers placed before the cut
      for (size_t i = 0; i < buffers.size(); ++i) {
        if (!before_cut[i]) continue;
        EXPECT_EQ(plan->offsets[i], online->offsets[i]) << what << ", buffer " << i;
        below_tail = std::max(below_tail, online->offsets[i] + buffers[i].size);
      }
      for (size_t i = 0; i < buffers.size(); ++i) {
        if (!before_cut[i] && buffers[i].size > 0) {
          EXPECT_GE(plan->offsets[i], below_tail) << what << ", buffer " << i;
        }
      }
    }
  }
}

// A limit long enough for everything leaves nothing stacked.
TEST(TimeLimitTest, WithTimeNothingIsStacked) {
  const std::vector<Buffer> buffers = training_step_trace({.num_buffers = 5'000, .seed = 4});
  for (Algorithm algorithm : {Algorithm::kExact, Algorithm::kBest}) {
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 30});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->stacked_by_limit, 0) << algorithm_name(algorithm);
  }
}

// On 300,000 buffers greedy costs 2-4 s, so a phase that ignored the limit
// would show. A call may take the limit or what cannot be cut (checks,
// bound, validation), whichever is longer; the bound allows the limit plus
// three times a whole online call (which includes all of those) plus half a
// second.
TEST(TimeLimitTest, LargeProblemsStayWithinTheLimitAndTheFirstPlan) {
  const std::vector<Buffer> buffers =
      training_step_trace({.num_buffers = 300'000, .seed = 6, .style = TraceStyle::kTransformer});
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Plan> online = plan_buffers(buffers, {.algorithm = Algorithm::kOnline});
  ASSERT_TRUE(online.ok()) << online.status();
  const double online_s = seconds_since(start);
  for (Algorithm algorithm : {Algorithm::kExact, Algorithm::kBest}) {
    for (double limit : {0.0, 0.3}) {
      start = std::chrono::steady_clock::now();
      absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = limit});
      const double took = seconds_since(start);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_LE(took, limit + 3 * online_s + 0.5)
          << algorithm_name(algorithm) << " with limit " << limit << " s; an online call took " << online_s << " s";
      if (plan->stacked_by_limit == 0) {
        EXPECT_LE(plan->peak, online->peak);
      }
    }
  }
}

// The budget: 10^5 buffers in at most 1 s, the whole call. The
// repacking phase that fills it starts only rounds its measured costs say
// will finish (NOTE [ Rounds that fit ] in planner/repack.cpp) and the
// deadline keeps twice the setup's cost for validation, so a quiet machine
// returns in 0.75-0.98 s and one with two more busy processes on two cores
// in 0.82-0.91 s (bench/RESULTS.md, issue 20, tenth pass). The tolerance,
// 5 ms, is for reading the clock, returning and one preemption of the
// thread on a CI machine running two test processes on two cores (a
// scheduler slice there is a few ms); before the margin, the three kLayers
// calls took 1.0063, 1.0066 and 1.0118 s, each over it.
TEST(TimeLimitTest, BestOnAHundredThousandBuffersStaysWithinOneSecond) {
  constexpr double kLimit = 1.0, kTolerance = 0.005;
  struct Case {
    uint64_t seed;
    TraceStyle style;
  };
  for (const Case& c : {Case{42, TraceStyle::kLayers}, Case{43, TraceStyle::kLayers},
                        Case{44, TraceStyle::kLayers}, Case{42, TraceStyle::kTransformer}}) {
    const std::vector<Buffer> buffers =
        training_step_trace({.num_buffers = 100'000, .seed = c.seed, .style = c.style});
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kBest, .time_limit_s = kLimit});
    const double took = seconds_since(start);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::string what = absl::StrCat("seed ", c.seed, c.style == TraceStyle::kLayers ? ", layers" : ", transformer");
    EXPECT_LE(took, kLimit + kTolerance) << what;
    EXPECT_TRUE(validate(buffers, *plan).ok()) << what;
    EXPECT_EQ(plan->stacked_by_limit, 0) << what;
    absl::StatusOr<Plan> online = plan_buffers(buffers, {.algorithm = Algorithm::kOnline});
    ASSERT_TRUE(online.ok()) << online.status();
    EXPECT_LE(plan->peak, online->peak) << what;
  }
}

}  // namespace
}  // namespace encore::planner
