// lower_bound(), validate() and check_buffers().
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace encore::planner {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(LowerBoundTest, EmptyIsZero) { EXPECT_EQ(lower_bound({}), 0); }

TEST(LowerBoundTest, MaxOverTimeOfLiveBytes) {
  const std::vector<Buffer> buffers = {
      {.id = "a", .size = 10, .lower = 0, .upper = 4},
      {.id = "b", .size = 5, .lower = 2, .upper = 6},
      {.id = "c", .size = 7, .lower = 5, .upper = 8},
  };
  // t in [2, 4): a + b = 15; t = 5: b + c = 12.
  EXPECT_EQ(lower_bound(buffers), 15);
}

TEST(LowerBoundTest, HalfOpenLifetimesDoNotCoexist) {
  const std::vector<Buffer> buffers = {
      {.id = "a", .size = 10, .lower = 0, .upper = 3},
      {.id = "b", .size = 20, .lower = 3, .upper = 5},
  };
  EXPECT_EQ(lower_bound(buffers), 20);
}

TEST(LowerBoundTest, RoundsToTheSmallestAlignmentExceptTheTopSlack) {
  // Offsets are multiples of 4, so the lower of two live 3-byte buffers
  // takes 4 bytes: peak >= 4 + 3. Offsets 0 and 4 reach it.
  const std::vector<Buffer> buffers = {
      {.id = "a", .size = 3, .lower = 0, .upper = 2, .alignment = 4},
      {.id = "b", .size = 3, .lower = 0, .upper = 2, .alignment = 4},
  };
  EXPECT_EQ(lower_bound(buffers), 7);
  EXPECT_TRUE(validate(buffers, {.offsets = {0, 4}, .peak = 7}).ok());
}

TEST(LowerBoundTest, MixedAlignmentsUseTheSmallest) {
  // b (alignment 1) can sit right after a: peak 3 + 3 = 6.
  const std::vector<Buffer> buffers = {
      {.id = "a", .size = 3, .lower = 0, .upper = 2, .alignment = 4},
      {.id = "b", .size = 3, .lower = 0, .upper = 2, .alignment = 1},
  };
  EXPECT_EQ(lower_bound(buffers), 6);
  EXPECT_TRUE(validate(buffers, {.offsets = {0, 3}, .peak = 6}).ok());
}

std::vector<Buffer> two_live_buffers() {
  return {{.id = "x1", .size = 8, .lower = 0, .upper = 5}, {.id = "y2", .size = 8, .lower = 3, .upper = 9}};
}

TEST(ValidateTest, AcceptsDisjointAddresses) {
  EXPECT_TRUE(validate(two_live_buffers(), {.offsets = {0, 8}, .peak = 16}).ok());
}

TEST(ValidateTest, AcceptsSharedAddressesAtDisjointTimes) {
  const std::vector<Buffer> buffers = {{.id = "a", .size = 8, .lower = 0, .upper = 3},
                                       {.id = "b", .size = 8, .lower = 3, .upper = 9}};
  EXPECT_TRUE(validate(buffers, {.offsets = {0, 0}, .peak = 8}).ok());
}

TEST(ValidateTest, CatchesPlantedOverlapAndNamesBothBuffers) {
  const absl::Status status = validate(two_live_buffers(), {.offsets = {0, 7}, .peak = 16});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'x1'"), HasSubstr("'y2'"), HasSubstr("overlap")));
}

TEST(ValidateTest, CatchesIdenticalOffsets) {
  EXPECT_FALSE(validate(two_live_buffers(), {.offsets = {4, 4}, .peak = 16}).ok());
}

TEST(ValidateTest, CatchesOverlapHiddenAmongManyBuffers) {
  // 100 buffers live at once, stacked; then one of them is moved down by 1.
  std::vector<Buffer> buffers;
  Plan plan;
  for (int i = 0; i < 100; ++i) {
    buffers.push_back({.id = absl::StrCat("s", i), .size = 10, .lower = i % 7, .upper = 100});
    plan.offsets.push_back(10 * i);
  }
  plan.peak = 1000;
  ASSERT_TRUE(validate(buffers, plan).ok());
  plan.offsets[57] -= 1;
  const absl::Status status = validate(buffers, plan);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'s56'"), HasSubstr("'s57'")));
}

TEST(ValidateTest, CatchesMisalignment) {
  std::vector<Buffer> buffers = two_live_buffers();
  buffers[1].alignment = 16;
  const absl::Status status = validate(buffers, {.offsets = {0, 8}, .peak = 16});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'y2'"), HasSubstr("aligned")));
}

TEST(ValidateTest, CatchesPeakBelowABuffer) {
  EXPECT_THAT(validate(two_live_buffers(), {.offsets = {0, 8}, .peak = 15}).message(), HasSubstr("peak"));
}

TEST(ValidateTest, CatchesWrongOffsetCountAndNegativeOffsets) {
  EXPECT_FALSE(validate(two_live_buffers(), {.offsets = {0}, .peak = 16}).ok());
  EXPECT_FALSE(validate(two_live_buffers(), {.offsets = {-8, 8}, .peak = 16}).ok());
}

TEST(ValidateTest, ZeroSizeBuffersOverlapNothing) {
  const std::vector<Buffer> buffers = {{.id = "a", .size = 8, .lower = 0, .upper = 3},
                                       {.id = "empty", .size = 0, .lower = 0, .upper = 3}};
  EXPECT_TRUE(validate(buffers, {.offsets = {0, 4}, .peak = 8}).ok());
}

TEST(CheckBuffersTest, RejectsEachBrokenInvariant) {
  struct Case {
    Buffer buffer;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{.id = "n", .size = -1, .lower = 0, .upper = 1}, "negative size"},
      {{.id = "u", .size = 1, .lower = 3, .upper = 3}, "upper 3 <= lower 3"},
      {{.id = "a", .size = 1, .lower = 0, .upper = 1, .alignment = 6}, "alignment 6"},
      {{.id = "z", .size = 1, .lower = 0, .upper = 1, .alignment = 0}, "alignment 0"},
  };
  for (const Case& c : cases) {
    const absl::Status status = check_buffers({c.buffer});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), AllOf(HasSubstr(c.message), HasSubstr(absl::StrCat("'", c.buffer.id, "'"))));
  }
}

TEST(CheckBuffersTest, RejectsDuplicateIds) {
  const std::vector<Buffer> buffers = {{.id = "d", .size = 1, .lower = 0, .upper = 1},
                                       {.id = "d", .size = 2, .lower = 0, .upper = 1}};
  EXPECT_THAT(check_buffers(buffers).message(), HasSubstr("duplicate id"));
  EXPECT_FALSE(plan_buffers(buffers).ok());
}

// check_buffers sorts hashed ids (NOTE [ Duplicate ids by sorted hashes ]);
// the message must still be the one a scan in index order gives: the lowest
// index that repeats an earlier id, naming that id's first index, unless a
// buffer before it is invalid. Enough buffers for the radix sort (>= 512).
TEST(CheckBuffersTest, NamesTheFirstRepeatAmongManyIds) {
  std::vector<Buffer> buffers;
  for (int i = 0; i < 10'000; ++i) buffers.push_back({.id = absl::StrCat("b", i), .size = 1, .lower = 0, .upper = 1});
  EXPECT_TRUE(check_buffers(buffers).ok());
  buffers[8000].id = "b5";
  buffers[7000].id = "b123";
  buffers[9000].id = "b123";
  EXPECT_THAT(check_buffers(buffers).message(), HasSubstr("buffer 7000 ('b123'): duplicate id (first at buffer 123)"));
  buffers[6000].size = -1;
  EXPECT_THAT(check_buffers(buffers).message(), HasSubstr("buffer 6000 ('b6000'): negative size -1"));
  buffers[7000].size = -1;  // invalid and a repeat: the repeat is named, as before
  buffers[6000].size = 1;
  EXPECT_THAT(check_buffers(buffers).message(), HasSubstr("buffer 7000 ('b123'): duplicate id"));
  std::vector<Buffer> same(100'000, Buffer{.id = "x", .size = 1, .lower = 0, .upper = 1});
  EXPECT_THAT(check_buffers(same).message(), HasSubstr("buffer 1 ('x'): duplicate id (first at buffer 0)"));
}

}  // namespace
}  // namespace encore::planner
