// The time limit of `exact` and `best` covers the whole call (NOTE [ The
// time limit covers the whole call ] in planner/plan.cpp). No assertion here
// compares a time with a fixed figure: one test is exact (no time, no phase
// after the first plan), the other compares with what the online plan
// costs on the same machine at the same moment, with generous slack.
#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "encore/planner.h"
#include "gtest/gtest.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// With no time at all, every phase after the online plan is skipped: no
// greedy ordering (which `best` used to run up to 20,000 buffers whatever
// the limit), no search node, no repacking. Small, middle and large sizes.
TEST(TimeLimitTest, WithoutTimeOnlyTheOnlinePlanIsMade) {
  const std::vector<std::vector<Buffer>> problems = {
      challenging_problem({.num_buffers = 200, .seed = 3}),
      training_step_trace({.num_buffers = 5'000, .seed = 4}),
      training_step_trace({.num_buffers = 30'000, .seed = 5, .style = TraceStyle::kTransformer}),
  };
  for (const std::vector<Buffer>& buffers : problems) {
    absl::StatusOr<Plan> online = plan_buffers(buffers, {.algorithm = Algorithm::kOnline});
    ASSERT_TRUE(online.ok()) << online.status();
    for (Algorithm algorithm : {Algorithm::kExact, Algorithm::kBest}) {
      absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 0});
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->offsets, online->offsets) << algorithm_name(algorithm) << ", " << buffers.size() << " buffers";
    }
  }
}

// On 300,000 buffers greedy costs 2-4 s, so a phase that ignored the limit
// would show. A call may take the limit or the first plan (checks, bound,
// online plan, validation), whichever is longer; the bound allows the limit
// plus three times a whole online call plus half a second.
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
      EXPECT_LE(plan->peak, online->peak);
    }
  }
}

}  // namespace
}  // namespace encore::planner
