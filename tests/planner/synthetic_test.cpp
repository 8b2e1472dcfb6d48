// The generated problems of planner/synthetic.h: shape, determinism, and the
// properties the benchmarks rely on.
#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "encore/planner.h"
#include "gtest/gtest.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

TEST(ChallengingProblemTest, LooksLikeMiniMallocsFamily) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const ChallengeOptions options{.num_buffers = 300, .seed = seed};
    const std::vector<Buffer> buffers = challenging_problem(options);
    ASSERT_EQ(buffers.size(), 300u);
    EXPECT_TRUE(check_buffers(buffers).ok());
    for (const Buffer& b : buffers) {
      EXPECT_EQ(b.size % 1024, 0);
      EXPECT_EQ(b.lower % 1024, 0);
      EXPECT_GE(b.lower, 0);
      EXPECT_LE(b.upper, options.capacity);
      EXPECT_GT(b.size, 0);
    }
    // Tight: the busiest time step holds most of the capacity, never more.
    const int64_t bound = lower_bound(buffers);
    EXPECT_LE(bound, options.capacity) << "seed " << seed;
    EXPECT_GE(bound, options.capacity * 8 / 10) << "seed " << seed;
  }
}

TEST(ChallengingProblemTest, IsDeterministicAndSeedDependent) {
  const std::vector<Buffer> a = challenging_problem({.seed = 3}), b = challenging_problem({.seed = 3});
  const std::vector<Buffer> c = challenging_problem({.seed = 4});
  ASSERT_EQ(a.size(), b.size());
  bool differs = a.size() != c.size();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].size, b[i].size);
    EXPECT_EQ(a[i].lower, b[i].lower);
    EXPECT_EQ(a[i].upper, b[i].upper);
    if (i < c.size()) differs |= a[i].size != c[i].size || a[i].lower != c[i].lower;
  }
  EXPECT_TRUE(differs);
}

// Without drops or shortened lifetimes every time step is full: the pieces
// tile the capacity x time rectangle.
TEST(ChallengingProblemTest, APerfectPackingFillsEveryTimeStep) {
  const std::vector<Buffer> buffers =
      challenging_problem({.num_buffers = 100, .seed = 9, .drop_percent = 0, .shrink_percent = 0});
  int64_t area = 0;
  for (const Buffer& b : buffers) area += b.size / 1024 * ((b.upper - b.lower) / 1024);
  EXPECT_EQ(area, int64_t{1024} * 1024);
  EXPECT_EQ(lower_bound(buffers), int64_t{1} << 20);
}

// Largest-first cuts without drops tile the rectangle too, and since every cut
// splits the largest piece, the areas spread evenly under a ceiling, as in the
// files: the largest is about twice the mean (squarish cuts leave one 4-17x it).
TEST(ChallengingProblemTest, LargestFirstCutsTileTheRectangleUnderACeiling) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<Buffer> buffers = challenging_problem({.num_buffers = 200, .seed = seed, .drop_percent = 0,
                                                             .shrink_percent = 0, .cuts = ChallengeCuts::kLargestFirst});
    int64_t area = 0, largest = 0, smallest = int64_t{1} << 40;
    for (const Buffer& b : buffers) {
      const int64_t cells = b.size / 1024 * ((b.upper - b.lower) / 1024);
      area += cells;
      largest = std::max(largest, cells);
      smallest = std::min(smallest, cells);
    }
    EXPECT_EQ(area, int64_t{1024} * 1024) << "seed " << seed;
    EXPECT_EQ(lower_bound(buffers), int64_t{1} << 20) << "seed " << seed;
    EXPECT_LT(largest, int64_t{1024} * 1024 / 50) << "seed " << seed;
    EXPECT_GT(largest, int64_t{1024} * 1024 / 200) << "seed " << seed;
    EXPECT_LT(smallest, largest);
  }
}

// minimalloc_like_problem: the files' character (NOTE [ Largest-first cuts ]):
// 150-450 buffers on the 1024 grid, about one time point per two buffers,
// nearly every point both an end and a start, and a lower bound at or just
// below 2^20 (never above: the constructed packing fits).
TEST(MiniMallocLikeProblemTest, HasTheFilesCharacter) {
  int below_capacity = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const std::vector<Buffer> buffers = minimalloc_like_problem(seed);
    ASSERT_GE(buffers.size(), 150u);
    ASSERT_LE(buffers.size(), 450u);
    EXPECT_TRUE(check_buffers(buffers).ok());
    std::set<int64_t> starts, ends;
    for (const Buffer& b : buffers) {
      EXPECT_EQ(b.size % 1024, 0);
      EXPECT_EQ(b.lower % 1024, 0);
      EXPECT_EQ(b.upper % 1024, 0);
      starts.insert(b.lower);
      ends.insert(b.upper);
    }
    std::set<int64_t> points = starts;
    points.insert(ends.begin(), ends.end());
    int both = 0;
    for (int64_t t : points) both += starts.contains(t) && ends.contains(t);
    const double per_buffer = double(points.size()) / double(buffers.size());
    EXPECT_GT(per_buffer, 0.4) << "seed " << seed;
    EXPECT_LT(per_buffer, 0.7) << "seed " << seed;
    // All but 0 and 2^20 (and the ends of dropped neighbours) both end and start buffers.
    EXPECT_GE(both * 10, static_cast<int>(points.size()) * 7) << "seed " << seed;
    const int64_t bound = lower_bound(buffers);
    EXPECT_LE(bound, int64_t{1} << 20) << "seed " << seed;
    EXPECT_GE(bound, (int64_t{1} << 20) * 9 / 10) << "seed " << seed;
    below_capacity += bound < int64_t{1} << 20;
  }
  EXPECT_GT(below_capacity, 0);   // some like C, D and J
  EXPECT_LT(below_capacity, 40);  // most like A, B and E
}

TEST(TrainingStepTraceTest, TransformerTracesHaveTheAskedSizeAndAreValid) {
  for (int n : {1000, 25'000}) {
    const std::vector<Buffer> buffers =
        training_step_trace({.num_buffers = n, .seed = 5, .style = TraceStyle::kTransformer, .micro_batches = 2});
    ASSERT_EQ(static_cast<int>(buffers.size()), n);
    EXPECT_TRUE(check_buffers(buffers).ok());
  }
}

// What makes these traces worth planning: greedy by size misses the lower
// bound on some of them (the kLayers traces it nearly always meets).
TEST(TrainingStepTraceTest, GreedyMissesTheBoundOnSomeTransformerTraces) {
  int missed = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::vector<Buffer> buffers =
        training_step_trace({.num_buffers = 5000, .seed = seed, .style = TraceStyle::kTransformer});
    absl::StatusOr<Plan> greedy = plan_buffers(buffers, {.algorithm = Algorithm::kGreedy});
    ASSERT_TRUE(greedy.ok());
    missed += greedy->peak > lower_bound(buffers);
  }
  EXPECT_GT(missed, 0);
}

}  // namespace
}  // namespace encore::planner
