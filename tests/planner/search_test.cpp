// The exact search against brute force, properties of every algorithm on
// random inputs, the 1% target on training-step traces, and the shared
// MiniMalloc problems.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gtest/gtest.h"
#include "planner/internal.h"
#include "planner/synthetic.h"
#include "tests/planner/planner_test_util.h"

namespace encore::planner {
namespace {

using testing::brute_force_by_offsets;
using testing::brute_force_by_orders;

int64_t exact_peak(const std::vector<Buffer>& buffers) {
  absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->peak : -1;
}

TEST(ExactVsBruteForceTest, MatchesTheBestOrderOnSmallRandomProblems) {
  int above_bound = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const int n = 2 + static_cast<int>(seed % 6);  // 2..7 buffers
    const bool aligned = seed % 3 == 0;
    const std::vector<Buffer> buffers = random_buffers(n, 1 + seed % 16, 3 + seed % 8, aligned, seed);
    const int64_t optimum = brute_force_by_orders(buffers);
    above_bound += optimum > lower_bound(buffers);
    ASSERT_EQ(exact_peak(buffers), optimum) << "seed " << seed;
  }
  EXPECT_GT(above_bound, 0) << "no problem needed a proof above the lower bound";
}

TEST(ExactVsBruteForceTest, MatchesEveryOffsetOnTinyProblems) {
  // No assumption about canonical plans here: every integer offset is tried.
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const std::vector<Buffer> buffers = random_buffers(2 + seed % 3, 4, 4, seed % 2 == 0, 1000 + seed);
    int64_t sum = 0;
    for (const Buffer& b : buffers) sum += b.size + b.alignment;
    ASSERT_EQ(exact_peak(buffers), brute_force_by_offsets(buffers, sum)) << "seed " << seed;
  }
}

// With a capacity, exact answers MiniMalloc's question: a plan within the
// optimum is found, and one below it is proven not to exist.
TEST(ExactVsBruteForceTest, DecidesCapacitiesAtAndBelowTheOptimum) {
  int proven_above_bound = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const std::vector<Buffer> buffers = random_buffers(3 + seed % 5, 1 + seed % 16, 3 + seed % 8, seed % 3 == 0, seed);
    const int64_t optimum = brute_force_by_orders(buffers);
    absl::StatusOr<Plan> fits =
        plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = optimum});
    ASSERT_TRUE(fits.ok()) << fits.status();
    EXPECT_LE(fits->peak, optimum) << "seed " << seed;
    if (optimum <= 1) continue;
    absl::StatusOr<Plan> below =
        plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = optimum - 1});
    ASSERT_TRUE(below.ok()) << below.status();
    EXPECT_GT(below->peak, optimum - 1) << "seed " << seed;
    EXPECT_GT(below->peak_floor, optimum - 1) << "seed " << seed << ": not proven";
    EXPECT_LE(below->peak_floor, optimum) << "seed " << seed;
    proven_above_bound += optimum > lower_bound(buffers);
  }
  EXPECT_GT(proven_above_bound, 0) << "no proof went beyond the lower bound";
}

// The proven floor never exceeds the optimum, and minimising proves it.
TEST(ExactVsBruteForceTest, ProvesTheOptimum) {
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    const std::vector<Buffer> buffers = random_buffers(2 + seed % 6, 1 + seed % 16, 3 + seed % 8, seed % 3 == 0, seed);
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->peak_floor, brute_force_by_orders(buffers)) << "seed " << seed;
    EXPECT_EQ(plan->peak, plan->peak_floor) << "seed " << seed;
  }
}

// Short horizons nest and repeat lifetimes, so many placements raise no
// other buffer (NOTE [ Hatless placements ] in planner/exact.cpp): the
// pruning after them must still find the optimum and prove the one below.
TEST(ExactVsBruteForceTest, HatlessPlacementsOnNestedLifetimes) {
  int proven_above_bound = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const std::vector<Buffer> buffers =
        random_buffers(5 + seed % 3, 1 + seed % 12, 2 + seed % 3, seed % 4 == 0, 500 + seed);
    const int64_t optimum = brute_force_by_orders(buffers);
    ASSERT_EQ(exact_peak(buffers), optimum) << "seed " << seed;
    if (optimum <= 1) continue;
    absl::StatusOr<Plan> below =
        plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = optimum - 1});
    ASSERT_TRUE(below.ok()) << below.status();
    EXPECT_GT(below->peak_floor, optimum - 1) << "seed " << seed << ": not proven";
    proven_above_bound += optimum > lower_bound(buffers);
  }
  EXPECT_GT(proven_above_bound, 0) << "no proof went beyond the lower bound";
}

// `exact` on one brute-forced problem, from a poor first plan (naive),
// asked the three questions: the minimum, the optimum as a capacity, and one
// byte below it. Every plan must be valid and every answer match brute
// force: the minimum found and proven, the optimum fit, the capacity below
// refuted and the floor never above the optimum. Returns the three results
// for the callers' counters.
std::vector<internal::ExactResult> expect_exact_answers(const std::vector<Buffer>& buffers,
                                                        int64_t first_node_limit, const std::string& where) {
  const int64_t optimum = brute_force_by_orders(buffers);
  const int64_t bound = lower_bound(buffers);
  const std::string at = absl::StrCat(where, ", optimum ", optimum);
  const internal::Deadline deadline(20.0);
  const Plan start = internal::plan_naive(buffers);
  const auto run = [&](int64_t capacity) {
    return internal::plan_exact(buffers, bound, start, deadline, capacity, first_node_limit);
  };
  std::vector<internal::ExactResult> results = {run(0), run(optimum), run(optimum - 1)};
  const internal::ExactResult& minimised = results[0];
  const internal::ExactResult& fits = results[1];
  const internal::ExactResult& below = results[2];
  for (const internal::ExactResult& r : results) EXPECT_TRUE(validate(buffers, r.plan).ok()) << at;
  EXPECT_EQ(minimised.plan.peak, optimum) << at;
  EXPECT_EQ(minimised.plan.peak_floor, optimum) << at;
  EXPECT_LE(fits.plan.peak, optimum) << at;
  EXPECT_GE(below.plan.peak, optimum) << at;
  EXPECT_GT(below.plan.peak_floor, optimum - 1) << at << ": not refuted";
  EXPECT_LE(below.plan.peak_floor, optimum) << at;
  return results;
}

// The decision search bounds buffer tops from tight sections and checks the
// other sections of a bounded buffer again (NOTE [ Deadlines ] in
// planner/exact.cpp). On problems where it does so, every answer must match
// brute force. Too strong a bound refutes the optimum; a bound that drops a
// reachable plan makes the floor overshoot.
TEST(ExactVsBruteForceTest, DeadlinesKeepEveryAnswer) {
  int64_t deadlines = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<Buffer> buffers =
        random_buffers(6 + seed % 3, 4 + seed % 13, 4 + seed % 7, seed % 4 == 0, 3000 + seed);
    for (const internal::ExactResult& r : expect_exact_answers(buffers, 0, absl::StrCat("seed ", seed))) {
      deadlines += r.deadlines;
    }
  }
  EXPECT_GT(deadlines, 100) << "too few bounded tops to test them";
}

// Eight buffers that split in time: one or two live (almost) throughout,
// perhaps one across two neighbouring groups, the rest in time-disjoint
// groups. Once the long ones are placed, each group is a piece solved on
// its own (split_and_solve in planner/exact.cpp).
std::vector<Buffer> split_buffers(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % uint64_t(hi - lo + 1)); };
  const bool aligned = seed % 3 == 0;
  const int64_t max_size = uniform(4, 16), length = uniform(2, 4);
  const int64_t groups = uniform(2, 3), end = groups * length;
  std::vector<Buffer> buffers;
  const auto add = [&](const std::string& id, int64_t lower, int64_t upper) {
    buffers.push_back({id, uniform(1, max_size), lower, upper, aligned ? int64_t{1} << uniform(0, 3) : 1});
  };
  // One draw per statement: the order of function arguments is unspecified.
  for (int64_t i = uniform(1, 2); i > 0; --i) {
    const int64_t upper = end - uniform(0, 1), lower = uniform(0, 1);
    add(absl::StrCat("long", i), lower, upper);
  }
  if (uniform(0, 1) == 1) {
    const int64_t g = uniform(0, groups - 2);
    const int64_t upper = (g + 1) * length + uniform(1, length), lower = g * length + uniform(0, length - 1);
    add("across", lower, upper);
  }
  while (buffers.size() < 8) {
    const int64_t g = uniform(0, groups - 1), lower = g * length + uniform(0, length - 1);
    add(absl::StrCat("g", g, "_", buffers.size()), lower, uniform(lower + 1, (g + 1) * length));
  }
  return buffers;
}

// Deadlines computed at a placement's offset stay in force in the pieces
// of a split, whose canonical order starts again at 0, below that offset,
// and the failure memo records a piece's failures under the piece's own
// constraint (NOTE [ Deadlines ] in planner/exact.cpp says why both are
// sound). Every answer must match brute force, with the default first node
// limit and with 1 (many rounds, so the memo is consulted across rankings
// and capacities). Here the memo matched 11,282 failures recorded in a
// piece under a constraint below the offset behind one of its deadlines
// (counted with a probe since removed; bench/RESULTS.md, issue 20
// seventeenth pass).
TEST(ExactVsBruteForceTest, DeadlinesHoldInSplitPieces) {
  int64_t deadlines = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    for (int64_t first_node_limit : {0, 1}) {
      const std::string where = absl::StrCat("seed ", seed, ", first node limit ", first_node_limit);
      for (const internal::ExactResult& r : expect_exact_answers(split_buffers(seed), first_node_limit, where)) {
        deadlines += r.deadlines;
      }
    }
  }
  EXPECT_GT(deadlines, 10'000) << "too few bounded tops to test them";
}

// Band repair (NOTE [ Band repair ] in planner/exact.cpp) runs when a probe
// is out of nodes; a first node limit of 1 puts every probe there, so on
// these small problems it runs in every round. Each plan it supplies must be
// valid, and since it proves nothing, the answers must still match brute
// force.
TEST(ExactVsBruteForceTest, BandRepairKeepsEveryAnswer) {
  int64_t repair_steps = 0, repaired = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    const std::vector<Buffer> buffers =
        random_buffers(5 + seed % 4, 4 + seed % 13, 4 + seed % 7, seed % 4 == 0, 7000 + seed);
    for (const internal::ExactResult& r : expect_exact_answers(buffers, 1, absl::StrCat("seed ", seed))) {
      repair_steps += r.repair_steps;
      repaired += r.repaired;
    }
  }
  EXPECT_GT(repair_steps, 1000) << "band repair hardly ran";
  EXPECT_GT(repaired, 0) << "band repair never supplied the plan returned";
}

// Seed 92 of minimalloc_like_problem at 2^20: the search alone does not fit
// it in 3 s (its dives and complete searches keep a wrong bottom); band
// repair reaches 2^20 from the bisection's plans in 0.7 s (bench/RESULTS.md,
// issue 20 eleventh pass). The search and the repair steps are deterministic
// up to the limit, so the plan returned is band repair's on every machine
// that gets there within it.
TEST(ExactOnGeneratedTest, BandRepairFitsWhatTheSearchDoesNot) {
  constexpr int64_t kCapacity = int64_t{1} << 20;
  const std::vector<Buffer> buffers = minimalloc_like_problem(92);
  const int64_t bound = lower_bound(buffers);
  const internal::Deadline deadline(20.0);
  const internal::ExactResult result =
      internal::plan_exact(buffers, bound, internal::plan_best_greedy(buffers), deadline, kCapacity);
  EXPECT_TRUE(validate(buffers, result.plan).ok());
  EXPECT_LE(result.plan.peak, kCapacity);
  EXPECT_TRUE(result.repaired) << "found by the search, not by band repair";
}

// Peaks may reach 2^62 (check_total in planner/plan.cpp), so band repair's
// band, a percentage of the peak, must not be computed as peak * percent in
// int64: 1,400 buffers of 2^48 bytes live throughout under a scaled
// minimalloc_like_problem put the peak near 2^58.5, where even the first
// step's 25 % of it overflowed (undefined behaviour;
// -fsanitize=signed-integer-overflow stops there, a release build wrapped to
// a negative band and fixed nothing). One repair search is enough to reach
// it, so the test asks for one, not for a rate (a sanitizer build is
// slower). The plans kept must stay valid and the floor at or below them.
TEST(ExactOnGeneratedTest, BandRepairOnPeaksNear2To58) {
  std::vector<Buffer> buffers = minimalloc_like_problem(92);
  int64_t end = 0;
  for (Buffer& b : buffers) {
    b.size <<= 28;  // at most 2^48, as check_buffers allows
    end = std::max(end, b.upper);
  }
  for (int i = 0; i < 1400; ++i) buffers.push_back({absl::StrCat("all", i), int64_t{1} << 48, 0, end, 1});
  const int64_t bound = lower_bound(buffers);
  ASSERT_GT(static_cast<double>(bound) * 25, 0x1p63) << "the first band would not overflow";
  const internal::Deadline deadline(1.0);
  const Plan start = internal::plan_best_greedy(buffers);
  const internal::ExactResult result = internal::plan_exact(buffers, bound, start, deadline, 0, 1);
  EXPECT_TRUE(validate(buffers, result.plan).ok());
  EXPECT_LE(result.plan.peak, start.peak);
  EXPECT_GE(result.plan.peak_floor, bound);
  EXPECT_LE(result.plan.peak_floor, result.plan.peak);
  EXPECT_GT(result.repair_steps, 0) << "band repair did not run";
}

// Problems with a known packing (challenging_problem): exact finds a plan
// within its capacity. Without dropped pieces or shortened lifetimes the
// packing is perfect, so the optimum is the capacity, which is also the
// lower bound.
TEST(ExactOnGeneratedTest, FindsTheConstructedPacking) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const ChallengeOptions options{.num_buffers = 40, .seed = seed, .drop_percent = seed % 2 == 0 ? 0 : 15};
    const std::vector<Buffer> buffers = challenging_problem(options);
    absl::StatusOr<Plan> plan =
        plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = options.capacity});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_LE(plan->peak, options.capacity) << "seed " << seed;
  }
}

// Many generated problems, not six files: 288 instances of the challenging
// family (30-80 buffers, every mix of 0/15/30 % dropped pieces and 0/30/60 %
// shortened lifetimes, four seeds each), each minimised by `exact`. The
// generator's capacity is feasible, so the minimum is at most it, and the
// search must prove the minimum (peak == peak_floor) on every one. The 180
// up to 65 buffers take 0.2 s together in a release build; the 108 at 70,
// 75 and 80 at most 0.023 s each (one at 75 was unsolved in 5 s before the
// rankings in time order, NOTE [ Rankings in time order ] in
// planner/exact.cpp). So the 20 s limit per instance is far away
// (bench/planner/exact_bench --grid_sizes=70,75,80 measures those sizes).
TEST(ExactOnGeneratedTest, ProvesTheMinimumOnManyInstances) {
  for (int num_buffers : {30, 40, 50, 60, 65, 70, 75, 80}) {
    for (int drop_percent : {0, 15, 30}) {
      for (int shrink_percent : {0, 30, 60}) {
        for (uint64_t seed = 1; seed <= 4; ++seed) {
          const ChallengeOptions options{.num_buffers = num_buffers, .seed = seed, .drop_percent = drop_percent,
                                         .shrink_percent = shrink_percent};
          const std::vector<Buffer> buffers = challenging_problem(options);
          absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20});
          ASSERT_TRUE(plan.ok()) << plan.status();
          const std::string where = absl::StrCat(num_buffers, " buffers, drop ", drop_percent, " %, shrink ",
                                                 shrink_percent, " %, seed ", seed);
          EXPECT_TRUE(validate(buffers, *plan).ok()) << where;
          EXPECT_LE(plan->peak, options.capacity) << where;
          EXPECT_EQ(plan->peak, plan->peak_floor) << where << ": not proven";
          EXPECT_GE(plan->peak_floor, lower_bound(buffers)) << where;
        }
      }
    }
  }
}

// Instances of the challenging files' character (minimalloc_like_problem) at
// the capacity they were cut from. Seeds 2, 12 and 62 need the rankings in
// time order (NOTE [ Rankings in time order ] in planner/exact.cpp): under
// MiniMalloc's four, 2 and 12 take over 3 s and 62 is not found in 20 s;
// with them each takes under 0.1 s. 18 and 91 need the limited discrepancy
// dives (not found in 20 s without, 0.3 s with). 10 and 77 took 2.6 s and
// 1.7 s CPU before the deadlines (NOTE [ Deadlines ]), 0.34 s each with
// them. The search is deterministic up to the limit, which only bounds a
// regression.
TEST(ExactOnGeneratedTest, FitsMinimallocLikeProblems) {
  constexpr int64_t kCapacity = int64_t{1} << 20;
  for (uint64_t seed : {2, 12, 62, 18, 91, 10, 77}) {
    const std::vector<Buffer> buffers = minimalloc_like_problem(seed);
    absl::StatusOr<Plan> plan =
        plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = kCapacity});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(validate(buffers, *plan).ok()) << "seed " << seed;
    EXPECT_LE(plan->peak, kCapacity) << "seed " << seed;
  }
}

TEST(PropertyTest, EveryAlgorithmValidatesAndNeverBeatsTheLowerBound) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const std::vector<Buffer> buffers =
        random_buffers(1 + static_cast<int>(seed * 7 % 120), int64_t{1} << (seed % 20), 1 + seed % 50, seed % 2, seed);
    const int64_t bound = lower_bound(buffers);
    for (Algorithm algorithm : all_algorithms()) {
      absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = 0.05});
      ASSERT_TRUE(plan.ok()) << algorithm_name(algorithm) << " seed " << seed << ": " << plan.status();
      EXPECT_TRUE(validate(buffers, *plan).ok()) << algorithm_name(algorithm) << " seed " << seed;
      EXPECT_GE(plan->peak, bound) << algorithm_name(algorithm) << " seed " << seed;
    }
  }
}

TEST(PropertyTest, SearchingNeverLosesToTheHeuristics) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<Buffer> buffers = random_buffers(60, 1000, 40, seed % 2, 500 + seed);
    absl::StatusOr<Plan> greedy = plan_buffers(buffers, {.algorithm = Algorithm::kBestGreedy});
    absl::StatusOr<Plan> online = plan_buffers(buffers, {.algorithm = Algorithm::kOnline});
    absl::StatusOr<Plan> best = plan_buffers(buffers, {.time_limit_s = 0.05});
    ASSERT_TRUE(greedy.ok() && online.ok() && best.ok());
    EXPECT_LE(best->peak, greedy->peak);
    EXPECT_LE(best->peak, online->peak);
  }
}

TEST(TrainingTraceTest, BestIsWithinOnePercentOfTheLowerBound) {
  for (int num_buffers : {500, 2000, 8000}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      for (int64_t alignment : {int64_t{1}, int64_t{256}}) {
        const std::vector<Buffer> buffers =
            training_step_trace({.num_buffers = num_buffers, .seed = seed, .alignment = alignment});
        absl::StatusOr<Plan> plan = plan_buffers(buffers, {.time_limit_s = 0.5});
        ASSERT_TRUE(plan.ok()) << plan.status();
        const double ratio = double(plan->peak) / double(lower_bound(buffers));
        EXPECT_LE(ratio, 1.01) << num_buffers << " buffers, seed " << seed << ", alignment " << alignment;
      }
    }
  }
}

TEST(TrainingTraceTest, CachingAllocatorNeedsMoreThanThePlan) {
  const std::vector<Buffer> buffers = training_step_trace({.num_buffers = 2000, .seed = 3});
  absl::StatusOr<Plan> caching = plan_buffers(buffers, {.algorithm = Algorithm::kCaching});
  absl::StatusOr<Plan> best = plan_buffers(buffers);
  absl::StatusOr<Plan> naive = plan_buffers(buffers, {.algorithm = Algorithm::kNaive});
  ASSERT_TRUE(caching.ok() && best.ok() && naive.ok());
  EXPECT_LT(best->peak, caching->peak);
  EXPECT_LT(caching->peak, naive->peak);
}

// The shared problems live outside the repository: without them (no
// $ENCORE_SHARED_DIR, or no file there) these tests skip; a file that is
// there but does not parse fails.
#define SKIP_WITHOUT_SHARED_DATA(problem)                                                                  \
  if (!(problem).ok() && (absl::IsNotFound((problem).status()) ||                                          \
                          absl::IsFailedPrecondition((problem).status()))) {                               \
    GTEST_SKIP() << (problem).status();                                                                    \
  }                                                                                                        \
  ASSERT_TRUE((problem).ok()) << (problem).status()

class SharedProblemTest : public ::testing::TestWithParam<std::string> {};

// `best` must fit each problem in 2^20 bytes (its published capacity; for all
// but C that is also the lower bound). The search stops as soon as it reaches
// the lower bound; the 20 s limit only bounds a regression. How fast it gets
// there is measured in bench/planner (bench/RESULTS.md), not asserted here:
// under a sanitizer or on a loaded machine it takes longer.
TEST_P(SharedProblemTest, BestFitsTheCapacity) {
  absl::StatusOr<CsvProblem> problem = testing::read_shared_problem(GetParam());
  SKIP_WITHOUT_SHARED_DATA(problem);
  absl::StatusOr<Plan> plan = plan_buffers(problem->buffers, {.time_limit_s = 20});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(validate(problem->buffers, *plan).ok());
  EXPECT_LE(plan->peak, 1048576);
  EXPECT_GE(plan->peak, lower_bound(problem->buffers));
  if (lower_bound(problem->buffers) == 1048576) {
    EXPECT_EQ(plan->peak, 1048576);
  }
  EXPECT_EQ(plan->peak, plan->peak_floor) << "optimal, and proven so";
}

// MiniMalloc's question on the same files: is there a plan within 2^20?
TEST_P(SharedProblemTest, ExactDecidesTheCapacity) {
  absl::StatusOr<CsvProblem> problem = testing::read_shared_problem(GetParam());
  SKIP_WITHOUT_SHARED_DATA(problem);
  absl::StatusOr<Plan> plan =
      plan_buffers(problem->buffers, {.algorithm = Algorithm::kExact, .time_limit_s = 20, .capacity = 1048576});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_LE(plan->peak, 1048576);
}

INSTANTIATE_TEST_SUITE_P(MiniMalloc, SharedProblemTest,
                         ::testing::Values("A.1048576.csv", "B.1048576.csv", "C.1048576.csv", "E.1048576.csv",
                                           "G.1048576.csv", "I.1048576.csv"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.substr(0, 1);
                         });

TEST(SharedProblemTest, ExampleIsSolvedOptimally) {
  absl::StatusOr<CsvProblem> problem = testing::read_shared_problem("example.12.csv");
  SKIP_WITHOUT_SHARED_DATA(problem);
  absl::StatusOr<Plan> plan = plan_buffers(problem->buffers);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->peak, 12);
}

}  // namespace
}  // namespace encore::planner
