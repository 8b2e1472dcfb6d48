// The generated problems of planner/synthetic.h: shape, determinism, and the
// properties the benchmarks rely on.
#include <cstdint>
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
