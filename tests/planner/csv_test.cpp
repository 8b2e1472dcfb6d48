// CSV parsing (every kind of bad input) and the write/read round trip.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "encore/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(CsvTest, ParsesMiniMallocExample) {
  absl::StatusOr<CsvProblem> problem = parse_csv(
      "id,lower,upper,size\n"
      "b1,0,3,4\n"
      "b2,3,9,4\n");
  ASSERT_TRUE(problem.ok()) << problem.status();
  ASSERT_EQ(problem->buffers.size(), 2u);
  EXPECT_EQ(problem->buffers[1].id, "b2");
  EXPECT_EQ(problem->buffers[1].lower, 3);
  EXPECT_EQ(problem->buffers[1].upper, 9);
  EXPECT_EQ(problem->buffers[1].size, 4);
  EXPECT_EQ(problem->buffers[1].alignment, 1);
  EXPECT_TRUE(problem->offsets.empty());
  EXPECT_FALSE(problem->has_alignment);
}

TEST(CsvTest, AcceptsAnyColumnOrderOptionalColumnsBlankLinesAndCrlf) {
  absl::StatusOr<CsvProblem> problem = parse_csv(
      "offset, size ,alignment,upper,lower,id\r\n"
      "\r\n"
      "64,10,32,5,1,act\r\n"
      "0,7,1,2,0,tmp\r\n");
  ASSERT_TRUE(problem.ok()) << problem.status();
  ASSERT_EQ(problem->buffers.size(), 2u);
  const Buffer& act = problem->buffers[0];
  EXPECT_EQ(act.id, "act");
  EXPECT_EQ(act.size, 10);
  EXPECT_EQ(act.lower, 1);
  EXPECT_EQ(act.upper, 5);
  EXPECT_EQ(act.alignment, 32);
  EXPECT_TRUE(problem->has_alignment);
  EXPECT_EQ(problem->offsets, (std::vector<int64_t>{64, 0}));
}

// NOTE [ Older MiniMalloc columns ]: the names of MiniMalloc's older
// benchmark files read as its reader does, an inclusive `end` as upper - 1.
TEST(CsvTest, ReadsMiniMallocsOlderColumnNames) {
  for (const char* header : {"buffer,start,end,size", "buffer_id,begin,end,size"}) {
    absl::StatusOr<CsvProblem> problem = parse_csv(absl::StrCat(header, "\nb1,0,2,4\nb2,3,8,4\n"));
    ASSERT_TRUE(problem.ok()) << header << ": " << problem.status();
    ASSERT_EQ(problem->buffers.size(), 2u);
    EXPECT_EQ(problem->buffers[1].id, "b2");
    EXPECT_EQ(problem->buffers[1].lower, 3);
    EXPECT_EQ(problem->buffers[1].upper, 9);   // end 8 is the last time it lives
    EXPECT_EQ(problem->buffers[0].upper, 3);
  }
  absl::StatusOr<CsvProblem> exclusive = parse_csv("buffer,begin,upper,size\nb1,0,3,4\n");
  ASSERT_TRUE(exclusive.ok()) << exclusive.status();
  EXPECT_EQ(exclusive->buffers[0].upper, 3);   // `upper` stays exclusive whatever names the others have
}

// A UTF-8 byte order mark (as some editors write) before the header is skipped.
TEST(CsvTest, SkipsAByteOrderMark) {
  absl::StatusOr<CsvProblem> problem = parse_csv("\xEF\xBB\xBFid,lower,upper,size\nb1,0,3,4\n");
  ASSERT_TRUE(problem.ok()) << problem.status();
  ASSERT_EQ(problem->buffers.size(), 1u);
  EXPECT_EQ(problem->buffers[0].id, "b1");
}

struct BadInput {
  const char* name;
  const char* text;
  const char* line;     // the line the message must name
  const char* problem;  // and what it must say
};

class CsvBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(CsvBadInputTest, RejectedWithLineAndProblem) {
  absl::StatusOr<CsvProblem> problem = parse_csv(GetParam().text);
  ASSERT_FALSE(problem.ok());
  EXPECT_EQ(problem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(problem.status().message(), AllOf(HasSubstr(GetParam().line), HasSubstr(GetParam().problem)));
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, CsvBadInputTest,
    ::testing::Values(
        BadInput{"MissingColumn", "id,lower,upper\nb1,0,3\n", "line 1:", "missing column 'size'"},
        BadInput{"UnknownColumn", "id,lower,upper,size,colour\nb1,0,3,4,red\n", "line 1:", "unknown column"},
        BadInput{"RepeatedColumn", "id,lower,upper,size,size\n", "line 1:", "appears twice"},
        BadInput{"ColumnAndItsOlderName", "id,lower,start,upper,size\n", "line 1:",
                 "column 'start' appears twice (as 'lower')"},
        BadInput{"EndAtTheLimit", "id,lower,end,size\nb1,0,9223372036854775807,4\n", "line 2:",
                 "end 9223372036854775807 + 1 does not fit in int64"},
        BadInput{"Empty", "\n\n", "line 1:", "missing header"},
        BadInput{"NotAnInteger", "id,lower,upper,size\nb1,0,3,4\nb2,0,3,4.5\n", "line 3:", "'4.5' is not an integer"},
        BadInput{"NotANumber", "id,lower,upper,size\nb1,zero,3,4\n", "line 2:", "column 'lower'"},
        BadInput{"NegativeSize", "id,lower,upper,size\nb1,0,3,4\n\nb2,0,3,-4\n", "line 4:", "negative size -4"},
        BadInput{"UpperNotAboveLower", "id,lower,upper,size\nb1,5,5,4\n", "line 2:", "upper 5 <= lower 5"},
        BadInput{"UpperBelowLower", "id,lower,upper,size\nb1,6,2,4\n", "line 2:", "upper 2 <= lower 6"},
        BadInput{"DuplicateId", "id,lower,upper,size\nb1,0,3,4\nb2,0,3,4\nb1,4,6,4\n", "line 4:",
                 "duplicate id 'b1' (first on line 2)"},
        BadInput{"AlignmentNotPowerOfTwo", "id,lower,upper,size,alignment\nb1,0,3,4,12\n", "line 2:",
                 "alignment 12 is not a power of two"},
        BadInput{"NegativeOffset", "id,lower,upper,size,offset\nb1,0,3,4,-1\n", "line 2:", "negative offset"},
        BadInput{"OffsetPlusSizeOverflows", "id,lower,upper,size,offset\nb1,0,3,4,9223372036854775804\n", "line 2:",
                 "offset 9223372036854775804 + size 4 does not fit in int64"},
        BadInput{"IntegerOverflows", "id,lower,upper,size\nb1,0,9223372036854775808,4\n", "line 2:",
                 "'9223372036854775808' is not an integer"},
        BadInput{"TooFewFields", "id,lower,upper,size\nb1,0,3\n", "line 2:", "expected 4 fields, found 3"},
        BadInput{"TooManyFields", "id,lower,upper,size\nb1,0,3,4,5\n", "line 2:", "expected 4 fields, found 5"},
        BadInput{"EmptyId", "id,lower,upper,size\n,0,3,4\n", "line 2:", "empty id"},
        BadInput{"ControlByteInId", "id,lower,upper,size\nb1,0,3,4\nb\x01" "z,0,3,4\n", "line 3:",
                 "id 'b\\x01z' holds the control byte 0x01"},
        BadInput{"EscapeInId", "id,lower,upper,size\n\x1b[31mred,0,3,4\n", "line 2:", "control byte 0x1b"},
        BadInput{"TabInId", "id,lower,upper,size\nb\t1,0,3,4\n", "line 2:", "control byte 0x09"},
        BadInput{"DeleteInId", "id,lower,upper,size\nb\x7f,0,3,4\n", "line 2:", "control byte 0x7f"},
        // A field quoted in a message is escaped as an id is: the terminal
        // title escape went to the terminal as it was.
        BadInput{"EscapeInColumnName", "id,lower,upper,si\x1b]0;pwned\x07ze\n", "line 1:",
                 "unknown column 'si\\x1b]0;pwned\\x07ze'"},
        BadInput{"EscapeInNumber", "id,lower,upper,size\na,0,2\x1b[31mRED,4\n", "line 2:",
                 "'2\\x1b[31mRED' is not an integer"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return std::string(info.param.name); });

// A NUL in a number ended the message where the tool printed it.
TEST(CsvTest, ANulInANumberIsEscapedInTheMessage) {
  absl::StatusOr<CsvProblem> problem = parse_csv(std::string("id,lower,upper,size\na,0,2\0EVIL,4\n", 33));
  ASSERT_FALSE(problem.ok());
  EXPECT_THAT(problem.status().message(), AllOf(HasSubstr("'2\\x00"), HasSubstr("' is not an integer")));
}

TEST(CsvTest, ReadMissingFileIsNotFound) {
  absl::StatusOr<CsvProblem> problem = read_csv("/nonexistent/encore/problem.csv");
  EXPECT_EQ(problem.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(problem.status().message(), HasSubstr("/nonexistent/encore/problem.csv"));
}

// A directory opens as a file on Linux and reads as nothing: it was
// reported as "line 1: missing header".
TEST(CsvTest, ReadDirectoryIsNamedAsOne) {
  absl::StatusOr<CsvProblem> problem = read_csv(::testing::TempDir());
  EXPECT_EQ(problem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(problem.status().message(), HasSubstr("is a directory, not a CSV file"));
}

// A file past 1 GiB is refused by its size, before it is read (a sparse
// file: no disk used); a pipe as soon as the read passes the limit.
TEST(CsvTest, ReadRefusesFilesOver1GiB) {
  const std::string path = ::testing::TempDir() + "/encore_csv_huge.csv";
  std::ofstream(path) << "id,lower,upper,size\n";
  std::filesystem::resize_file(path, (uint64_t{1} << 30) + 1);
  absl::StatusOr<CsvProblem> problem = read_csv(path);
  std::filesystem::remove(path);
  EXPECT_EQ(problem.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(problem.status().message(), HasSubstr("larger than 1073741824 bytes"));
}

TEST(CsvTest, ReadMissingFileNamesTheCause) {
  EXPECT_THAT(read_csv("/nonexistent/encore/problem.csv").status().message(), HasSubstr("No such file or directory"));
}

// The README promises every write failure with its cause.
TEST(CsvTest, WriteFailuresNameTheCause) {
  absl::Status missing = write_file("/nonexistent/encore/plan.csv", "x");
  EXPECT_THAT(missing.message(), AllOf(HasSubstr("cannot write '/nonexistent/encore/plan.csv'"),
                                       HasSubstr("No such file or directory")));
  EXPECT_THAT(write_file(::testing::TempDir(), "x").message(), HasSubstr("Is a directory"));
  if (std::ifstream("/dev/full").good()) {
    EXPECT_THAT(write_file("/dev/full", "x").message(),
                AllOf(HasSubstr("error while writing '/dev/full'"), HasSubstr("No space left on device")));
  }
}

TEST(CsvTest, RoundTripKeepsBuffersAndOffsets) {
  const std::vector<Buffer> buffers = training_step_trace({.num_buffers = 300, .seed = 5, .alignment = 64});
  absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kGreedy});
  ASSERT_TRUE(plan.ok());
  absl::StatusOr<CsvProblem> back = parse_csv(format_csv(buffers, &*plan, /*with_alignment=*/true));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->buffers.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(back->buffers[i].id, buffers[i].id);
    EXPECT_EQ(back->buffers[i].size, buffers[i].size);
    EXPECT_EQ(back->buffers[i].lower, buffers[i].lower);
    EXPECT_EQ(back->buffers[i].upper, buffers[i].upper);
    EXPECT_EQ(back->buffers[i].alignment, buffers[i].alignment);
  }
  EXPECT_EQ(back->offsets, plan->offsets);
}

TEST(CsvTest, WithoutPlanOrAlignmentWritesMiniMallocColumns) {
  const std::vector<Buffer> buffers = {{.id = "b1", .size = 4, .lower = 0, .upper = 3}};
  EXPECT_EQ(format_csv(buffers, nullptr, false), "id,lower,upper,size\nb1,0,3,4\n");
}

}  // namespace
}  // namespace encore::planner
