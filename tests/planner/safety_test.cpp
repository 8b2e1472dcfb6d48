// Inputs at the edges of int64 and deadlines on large problems (issue #17):
// the planner must neither overflow nor overrun its time limit.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Either a valid plan or a clear InvalidArgument / ResourceExhausted.
void expect_valid_or_refused(const std::vector<Buffer>& buffers, Algorithm algorithm) {
  absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 1});
  if (plan.ok()) {
    EXPECT_TRUE(validate(buffers, *plan).ok()) << algorithm_name(algorithm);
    return;
  }
  EXPECT_THAT(plan.status().code(),
              AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kResourceExhausted))
      << algorithm_name(algorithm) << ": " << plan.status();
}

TEST(PlannerSafetyTest, LifetimesSpanningTheWholeInt64Range) {
  const std::vector<Buffer> buffers = {
      {.id = "all", .size = 1 << 20, .lower = kMin, .upper = kMax},
      {.id = "half", .size = 1 << 10, .lower = kMin / 2, .upper = kMax / 2 + 1},
      {.id = "low", .size = 1 << 12, .lower = kMin, .upper = kMin + 1},
      {.id = "high", .size = 1 << 12, .lower = kMax - 1, .upper = kMax, .alignment = 64},
      {.id = "mid", .size = 1 << 16, .lower = -1, .upper = 1},
  };
  for (Algorithm algorithm : all_algorithms()) {
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 1});
    ASSERT_TRUE(plan.ok()) << algorithm_name(algorithm) << ": " << plan.status();
    EXPECT_TRUE(validate(buffers, *plan).ok()) << algorithm_name(algorithm);
  }
  EXPECT_EQ(lower_bound(buffers), (1 << 20) + (1 << 10) + (1 << 16));
}

// Greedy breaks ties in size by the longer lifetime: [INT64_MIN, INT64_MAX)
// is the longest there is, so "all" goes first, at offset 0. (Computed in
// int64, its length overflowed and it came last.)
TEST(PlannerSafetyTest, TheLongestLifetimeIsLongest) {
  const std::vector<Buffer> buffers = {
      {.id = "short", .size = 8, .lower = 0, .upper = 10},
      {.id = "all", .size = 8, .lower = kMin, .upper = kMax},
  };
  absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kGreedy});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->offsets, (std::vector<int64_t>{8, 0}));
}

TEST(PlannerSafetyTest, LargeSizesOverHugeLifetimes) {
  const int64_t big = int64_t{1} << 48;  // the largest size check_buffers takes
  const std::vector<Buffer> buffers = {
      {.id = "a", .size = big, .lower = kMin, .upper = kMax, .alignment = int64_t{1} << 40},
      {.id = "b", .size = big, .lower = kMin / 2, .upper = kMax / 2},
      {.id = "c", .size = big - 1, .lower = 0, .upper = kMax},
  };
  for (Algorithm algorithm : all_algorithms()) expect_valid_or_refused(buffers, algorithm);
  // Sizes near INT64_MAX / 2 are refused up front, naming the buffer.
  const std::vector<Buffer> huge = {{.id = "h", .size = kMax / 2, .lower = kMin, .upper = kMax}};
  absl::StatusOr<Plan> plan = plan_buffers(huge);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("'h'"));
}

// 2^15 + 1 buffers of 2^48 bytes live at once need more than 2^63 bytes: the
// peak would wrap. The planner refuses instead, naming a buffer.
TEST(PlannerSafetyTest, SizesWhoseSumOverflowsAreRefused) {
  std::vector<Buffer> buffers;
  for (int i = 0; i <= (1 << 15); ++i) {
    buffers.push_back({.id = absl::StrCat("b", i), .size = int64_t{1} << 48, .lower = 0, .upper = 2,
                       .alignment = 256});
  }
  for (Algorithm algorithm : {Algorithm::kNaive, Algorithm::kGreedy, Algorithm::kBest}) {
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm});
    ASSERT_FALSE(plan.ok()) << algorithm_name(algorithm) << ": peak " << plan->peak;
    EXPECT_THAT(plan.status().code(),
                AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kResourceExhausted))
        << plan.status();
    EXPECT_THAT(plan.status().message(), HasSubstr("2^62")) << plan.status();
  }
  // The lower bound saturates instead of wrapping.
  EXPECT_EQ(lower_bound(buffers), kMax);
}

// A user's plan whose offset + size overflows is invalid, not a wrap.
TEST(PlannerSafetyTest, ValidateRejectsOffsetsThatOverflow) {
  const std::vector<Buffer> buffers = {{.id = "x", .size = 16, .lower = 0, .upper = 1}};
  const Plan plan{.offsets = {kMax - 8}, .peak = kMax};
  const absl::Status status = validate(buffers, plan);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("'x'"));
}

// With no time at all, `exact` does a bounded amount of work: the online
// walk stops at its first clock check (4096 events) and stacks the rest
// (TimeLimitTest checks the cut in detail); no greedy ordering runs (all
// four took 40 s on 10^6 buffers).
TEST(PlannerSafetyTest, ExactWithoutTimeCutsTheOnlinePlan) {
  const std::vector<Buffer> buffers = training_step_trace({.num_buffers = 50'000, .seed = 3});
  absl::StatusOr<Plan> exact = plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 0});
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_TRUE(validate(buffers, *exact).ok());
  EXPECT_GT(exact->stacked_by_limit, 45'000);
}

// A large problem with a short limit still gets a valid plan (speed is
// measured in bench/planner, not asserted here).
TEST(PlannerSafetyTest, ExactOnALargeProblemReturnsAValidPlan) {
  const std::vector<Buffer> buffers = training_step_trace({.num_buffers = 200'000, .seed = 5});
  for (Algorithm algorithm : {Algorithm::kExact, Algorithm::kBest}) {
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 0.2});
    ASSERT_TRUE(plan.ok()) << algorithm_name(algorithm) << ": " << plan.status();
    EXPECT_TRUE(validate(buffers, *plan).ok());
    EXPECT_GE(plan->peak, lower_bound(buffers));
  }
}

}  // namespace
}  // namespace encore::planner
