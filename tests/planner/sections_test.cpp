// The section problem the exact search works on: its grain (NOTE [ Grain ] in
// planner/sections.cpp), and plans at that grain against brute force.
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gtest/gtest.h"
#include "planner/sections.h"
#include "planner/synthetic.h"
#include "tests/planner/planner_test_util.h"

namespace encore::planner {
namespace {

using testing::brute_force_by_offsets;
using testing::brute_force_by_orders;

// Buffers all live over [0, 2), so every pair overlaps.
std::vector<Buffer> overlapping(const std::vector<int64_t>& sizes, const std::vector<int64_t>& alignments) {
  std::vector<Buffer> buffers;
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers.push_back({absl::StrCat("b", i), sizes[i], 0, 2, alignments[i]});
  }
  return buffers;
}

int64_t grain_of(const std::vector<Buffer>& buffers) {
  const std::optional<internal::SectionProblem> problem = internal::make_section_problem(buffers, 1'000'000);
  EXPECT_TRUE(problem.has_value());
  return problem ? problem->grain : -1;
}

absl::StatusOr<Plan> exact(const std::vector<Buffer>& buffers, int64_t capacity = 0) {
  return plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = capacity});
}

// Alignment 1 divides every offset: the grain is the gcd of the sizes, 64,
// where the gcd with the alignments (the rule before) gave 1.
TEST(GrainTest, AlignmentOneKeepsTheGcdOfTheSizes) {
  EXPECT_EQ(grain_of(overlapping({192, 320}, {1, 1})), 64);
}

// 32 divides 64 and 256 is a multiple of it: both keep 64 (before: 32).
TEST(GrainTest, AlignmentsDividingOrMultiplesOfTheGcdKeepIt) {
  EXPECT_EQ(grain_of(overlapping({64, 128}, {32, 256})), 64);
}

// 64 neither divides 96 nor is a multiple of it: the grain drops to 32.
TEST(GrainTest, OtherAlignmentsLowerIt) {
  EXPECT_EQ(grain_of(overlapping({96, 96}, {64, 64})), 32);
  // Offsets 0 and 128 (the second buffer rounded up from 96): peak 224.
  absl::StatusOr<Plan> plan = exact(overlapping({96, 96}, {64, 64}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->peak, 224);
  EXPECT_EQ(plan->peak_floor, 224);
}

// Zero-size buffers take no part; with no other buffer the grain is 1.
TEST(GrainTest, IgnoresEmptyBuffers) {
  EXPECT_EQ(grain_of(overlapping({0, 48, 80}, {4096, 1, 16})), 16);
  EXPECT_EQ(grain_of(overlapping({0}, {8})), 1);
}

// The plan at the coarser grain is still optimal and proven: 192 + 320 = 512,
// and 511 is refuted. Refuting 511 raises the floor by a grain, to 575, which
// a wrong (too coarse) grain would carry past the optimum; the floor
// reported is min(floor, peak).
TEST(GrainTest, PlansAtTheGrainAreOptimalAndProven) {
  const std::vector<Buffer> buffers = overlapping({192, 320}, {1, 1});
  absl::StatusOr<Plan> plan = exact(buffers);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(validate(buffers, *plan).ok());
  EXPECT_EQ(plan->peak, 512);
  EXPECT_EQ(plan->peak_floor, 512);
  absl::StatusOr<Plan> below = exact(buffers, 511);
  ASSERT_TRUE(below.ok()) << below.status();
  EXPECT_GT(below->peak_floor, 511);
  EXPECT_LE(below->peak_floor, 512);
}

// Random problems whose sizes share a unit (multiples of 8, 12 or 24) and
// whose alignments (powers of two up to 32) mix all three cases: exact
// minimises to the brute-force optimum and proves it, and the capacity one
// below the optimum is refuted. A grain that skipped a reachable peak would
// make the floor overshoot the optimum here.
TEST(GrainTest, MatchesBruteForceWithSharedUnits) {
  int coarser = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    const int64_t unit = seed % 3 == 0 ? 8 : seed % 3 == 1 ? 12 : 24;
    std::vector<Buffer> buffers = random_buffers(3 + seed % 5, 6, 3 + seed % 6, /*aligned=*/true, 7000 + seed);
    for (Buffer& b : buffers) b.size *= unit;
    const int64_t grain = grain_of(buffers);
    int64_t all_gcd = 0;
    for (const Buffer& b : buffers) all_gcd = std::gcd(all_gcd, std::gcd(b.size, b.alignment));
    coarser += grain > all_gcd;
    const std::string where = absl::StrCat("seed ", seed, ", grain ", grain);
    const int64_t optimum = brute_force_by_orders(buffers);
    absl::StatusOr<Plan> plan = exact(buffers);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(validate(buffers, *plan).ok()) << where;
    EXPECT_EQ(plan->peak, optimum) << where;
    EXPECT_EQ(plan->peak_floor, optimum) << where;
    absl::StatusOr<Plan> below = exact(buffers, optimum - 1);
    ASSERT_TRUE(below.ok()) << below.status();
    EXPECT_GT(below->peak_floor, optimum - 1) << where << ": not proven";
    EXPECT_LE(below->peak_floor, optimum) << where;
  }
  EXPECT_GT(coarser, 20) << "too few problems where the grain is coarser than the old rule's";
}

// Every integer offset, no canonical assumption, on tiny problems of the same
// kind (sizes multiples of 6, alignments 1-32).
TEST(GrainTest, MatchesEveryOffsetWithSharedUnits) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::vector<Buffer> buffers = random_buffers(2 + seed % 3, 3, 4, /*aligned=*/true, 9000 + seed);
    int64_t sum = 0;
    for (Buffer& b : buffers) {
      b.size *= 6;
      sum += b.size + b.alignment;
    }
    absl::StatusOr<Plan> plan = exact(buffers);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->peak, brute_force_by_offsets(buffers, sum)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace encore::planner
