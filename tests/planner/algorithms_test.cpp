// Each algorithm on hand-made problems whose answer can be worked out by hand.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace encore::planner {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

Plan plan_with(const std::vector<Buffer>& buffers, Algorithm algorithm) {
  absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 10});
  EXPECT_TRUE(plan.ok()) << algorithm_name(algorithm) << ": " << plan.status();
  if (!plan.ok()) return {};
  EXPECT_TRUE(validate(buffers, *plan).ok()) << algorithm_name(algorithm);
  return *plan;
}

// MiniMalloc's example: fits in 12 bytes (its lower bound).
std::vector<Buffer> minimalloc_example() {
  return {{.id = "b1", .size = 4, .lower = 0, .upper = 3},  {.id = "b2", .size = 4, .lower = 3, .upper = 9},
          {.id = "b3", .size = 4, .lower = 0, .upper = 9},  {.id = "b4", .size = 4, .lower = 9, .upper = 21},
          {.id = "b5", .size = 4, .lower = 0, .upper = 21}};
}

// Optimum 16 = lower bound (at t = 1: r0 + r1 + r3): r3 at 0, r0 at 6, r1 at
// 10, r2 at 12, r4 at 6. Greedy, under every ordering it tries, needs more.
std::vector<Buffer> greedy_trap() {
  return {{.id = "r0", .size = 4, .lower = 0, .upper = 3}, {.id = "r1", .size = 6, .lower = 1, .upper = 2},
          {.id = "r2", .size = 3, .lower = 2, .upper = 5}, {.id = "r3", .size = 6, .lower = 0, .upper = 5},
          {.id = "r4", .size = 6, .lower = 4, .upper = 5}};
}

TEST(AlgorithmNamesTest, RoundTripAndUnknownName) {
  for (Algorithm algorithm : all_algorithms()) {
    absl::StatusOr<Algorithm> parsed = parse_algorithm(algorithm_name(algorithm));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, algorithm);
  }
  absl::StatusOr<Algorithm> unknown = parse_algorithm("fastest");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("best_greedy"));
  EXPECT_EQ(PlanOptions{}.algorithm, Algorithm::kBest);
}

TEST(AllAlgorithmsTest, EmptyAndSingleBuffer) {
  for (Algorithm algorithm : all_algorithms()) {
    EXPECT_EQ(plan_with({}, algorithm).peak, 0) << algorithm_name(algorithm);
    const Plan one = plan_with({{.id = "x", .size = 100, .lower = 0, .upper = 1}}, algorithm);
    EXPECT_EQ(one.offsets, (std::vector<int64_t>{0})) << algorithm_name(algorithm);
  }
}

TEST(AllAlgorithmsTest, BuffersLiveAtDisjointTimesShareMemory) {
  const std::vector<Buffer> buffers = {{.id = "a", .size = 5, .lower = 0, .upper = 1},
                                       {.id = "b", .size = 7, .lower = 1, .upper = 2},
                                       {.id = "c", .size = 3, .lower = 2, .upper = 3}};
  for (Algorithm algorithm : {Algorithm::kOnline, Algorithm::kGreedy, Algorithm::kBestGreedy, Algorithm::kExact,
                              Algorithm::kBest}) {
    EXPECT_EQ(plan_with(buffers, algorithm).peak, 7) << algorithm_name(algorithm);
  }
}

TEST(AllAlgorithmsTest, RejectInvalidInputAndNegativeTimeLimit) {
  const std::vector<Buffer> bad = {{.id = "x", .size = 4, .lower = 2, .upper = 1}};
  for (Algorithm algorithm : all_algorithms()) {
    EXPECT_EQ(plan_buffers(bad, {.algorithm = algorithm}).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(plan_buffers(minimalloc_example(), {.time_limit_s = -1}).ok());
}

TEST(NaiveTest, EveryBufferItsOwnSlotInInputOrder) {
  const std::vector<Buffer> buffers = {{.id = "a", .size = 5, .lower = 0, .upper = 1},
                                       {.id = "b", .size = 7, .lower = 1, .upper = 2, .alignment = 8},
                                       {.id = "c", .size = 3, .lower = 2, .upper = 3}};
  const Plan plan = plan_with(buffers, Algorithm::kNaive);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 8, 15}));
  EXPECT_EQ(plan.peak, 18);
}

TEST(OnlineTest, TakesTheSmallestHoleThatFits) {
  // At t = 1, "b" and "d" have left holes of 50 bytes at 100 and 30 bytes at
  // 160. "f" (25 bytes) goes to the smaller one; first fit would take 100.
  const std::vector<Buffer> buffers = {
      {.id = "a", .size = 100, .lower = 0, .upper = 10}, {.id = "b", .size = 50, .lower = 0, .upper = 1},
      {.id = "c", .size = 10, .lower = 0, .upper = 10},  {.id = "d", .size = 30, .lower = 0, .upper = 1},
      {.id = "e", .size = 10, .lower = 0, .upper = 10},  {.id = "f", .size = 25, .lower = 1, .upper = 5}};
  const Plan plan = plan_with(buffers, Algorithm::kOnline);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 100, 150, 160, 190, 160}));
  EXPECT_EQ(plan.peak, 200);
}

TEST(OnlineTest, FreedNeighboursCoalesce) {
  // "a" and "b" free at t = 1; together they hold "c" (16 bytes) at 0.
  const std::vector<Buffer> buffers = {{.id = "a", .size = 8, .lower = 0, .upper = 1},
                                       {.id = "b", .size = 8, .lower = 0, .upper = 1},
                                       {.id = "keep", .size = 8, .lower = 0, .upper = 3},
                                       {.id = "c", .size = 16, .lower = 1, .upper = 3}};
  const Plan plan = plan_with(buffers, Algorithm::kOnline);
  EXPECT_EQ(plan.offsets[3], 0);
  EXPECT_EQ(plan.peak, 24);
}

TEST(GreedyTest, SolvesTheMiniMallocExample) {
  EXPECT_EQ(plan_with(minimalloc_example(), Algorithm::kGreedy).peak, 12);
}

TEST(GreedyTest, HonoursAlignment) {
  std::vector<Buffer> buffers;
  for (int i = 0; i < 6; ++i) {
    buffers.push_back({.id = absl::StrCat("a", i), .size = 3 + i, .lower = i, .upper = i + 3, .alignment = 16});
  }
  for (Algorithm algorithm : all_algorithms()) {
    const Plan plan = plan_with(buffers, algorithm);
    for (int64_t offset : plan.offsets) EXPECT_EQ(offset % 16, 0) << algorithm_name(algorithm);
  }
}

TEST(ExactTest, FindsTheOptimumGreedyMisses) {
  const std::vector<Buffer> buffers = greedy_trap();
  ASSERT_EQ(lower_bound(buffers), 16);
  EXPECT_GT(plan_with(buffers, Algorithm::kBestGreedy).peak, 16);
  EXPECT_EQ(plan_with(buffers, Algorithm::kExact).peak, 16);
  EXPECT_EQ(plan_with(buffers, Algorithm::kBest).peak, 16);
}

TEST(ExactTest, ProvesOptimumAboveTheLowerBound) {
  // b and c need two multiples of 4, so one of them ends at 7 or above; a
  // cannot fit below 4 beside the other, so it ends at 10 or above. The lower
  // bound (alignment 1 is the smallest) is only 9.
  const std::vector<Buffer> buffers = {{.id = "a", .size = 3, .lower = 0, .upper = 2},
                                       {.id = "b", .size = 3, .lower = 0, .upper = 2, .alignment = 4},
                                       {.id = "c", .size = 3, .lower = 0, .upper = 2, .alignment = 4}};
  ASSERT_EQ(lower_bound(buffers), 9);
  EXPECT_EQ(plan_with(buffers, Algorithm::kExact).peak, 10);
  EXPECT_EQ(plan_with(buffers, Algorithm::kBest).peak, 10);
}

// ---- caching: PyTorch's CUDA caching allocator --------------------------------

TEST(CachingTest, SmallRequestsShareOneTwoMiBSegment) {
  const std::vector<Buffer> buffers = {{.id = "a", .size = 100, .lower = 0, .upper = 2},
                                       {.id = "b", .size = 700, .lower = 1, .upper = 2}};
  const Plan plan = plan_with(buffers, Algorithm::kCaching);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 512}));  // 100 rounds up to 512
  EXPECT_EQ(plan.peak, 2 * kMiB);
}

TEST(CachingTest, SegmentSizesFollowTheRequest) {
  auto peak_for = [](int64_t size) {
    return plan_with({{.id = "x", .size = size, .lower = 0, .upper = 1}}, Algorithm::kCaching).peak;
  };
  EXPECT_EQ(peak_for(kMiB), 2 * kMiB);        // small pool
  EXPECT_EQ(peak_for(kMiB + 1), 20 * kMiB);   // large pool, under 10 MiB
  EXPECT_EQ(peak_for(10 * kMiB), 10 * kMiB);  // large, rounded to 2 MiB
  EXPECT_EQ(peak_for(11 * kMiB), 12 * kMiB);
}

TEST(CachingTest, ReusesFreedBlocksAndNeverReturnsMemory) {
  // "a" (3 MiB) opens a 20 MiB segment; freed, it merges back whole, and "b"
  // reuses its start. "big" (30 MiB) needs a second segment. When "c" comes,
  // both segments are free: best fit picks the 20 MiB block.
  const std::vector<Buffer> buffers = {{.id = "a", .size = 3 * kMiB, .lower = 0, .upper = 1},
                                       {.id = "b", .size = 3 * kMiB, .lower = 1, .upper = 2},
                                       {.id = "big", .size = 30 * kMiB, .lower = 2, .upper = 3},
                                       {.id = "c", .size = 3 * kMiB, .lower = 3, .upper = 4}};
  const Plan plan = plan_with(buffers, Algorithm::kCaching);
  EXPECT_EQ(plan.offsets[1], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[3], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[2], 20 * kMiB);  // the second segment follows the first
  EXPECT_EQ(plan.peak, 50 * kMiB);        // both stay reserved
}

TEST(CachingTest, SplitsAndCoalescesWithinASegment) {
  // Three 512-byte blocks; freeing the first two merges them into one 1 KiB
  // block that then holds a 1 KiB request at the segment start.
  const std::vector<Buffer> buffers = {{.id = "a", .size = 512, .lower = 0, .upper = 1},
                                       {.id = "b", .size = 512, .lower = 0, .upper = 1},
                                       {.id = "c", .size = 512, .lower = 0, .upper = 3},
                                       {.id = "d", .size = 1024, .lower = 1, .upper = 3}};
  const Plan plan = plan_with(buffers, Algorithm::kCaching);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 512, 1024, 0}));
  EXPECT_EQ(plan.peak, 2 * kMiB);
}

TEST(CachingTest, LargeBlocksKeepTheirTailOnlyWhenOverOneMiB) {
  // A 19.5 MiB request in a 20 MiB segment leaves 0.5 MiB: not split, so a
  // later small request cannot use it and opens a small segment.
  const std::vector<Buffer> buffers = {{.id = "big", .size = 19 * kMiB + kMiB / 2, .lower = 0, .upper = 2},
                                       {.id = "small", .size = 4096, .lower = 1, .upper = 2}};
  const Plan plan = plan_with(buffers, Algorithm::kCaching);
  EXPECT_EQ(plan.offsets[1], 20 * kMiB);
  EXPECT_EQ(plan.peak, 22 * kMiB);
}

}  // namespace
}  // namespace encore::planner
