// encore-plan, run as a user would: exit status, messages, --out and --svg.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/synthetic.h"
#include "tests/svg_test_util.h"
#include "tests/tool_run.h"

namespace encore::planner {
namespace {

using ::testing::HasSubstr;

using testing::slurp;
using testing::ToolRun;

std::string temp_path(const std::string& name) { return testing::temp_path("encore_plan_", name); }

// Runs the built encore-plan (path from the build, or $ENCORE_PLAN_BIN).
ToolRun run_tool(const std::string& args) {
  return testing::run_tool(testing::tool_path("ENCORE_PLAN_BIN", ENCORE_PLAN_PATH), args, "encore_plan_");
}

std::string write_temp(const std::string& name, const std::string& contents) {
  const std::string path = temp_path(name);
  std::ofstream(path) << contents;
  return path;
}

const char kExample[] = "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n";

// Exit 2 for a bad flag, 1 for bad input or a failed write (encore_plan.cpp).
void expect_one_line_error(const ToolRun& run, const std::string& what, int exit_code = 1) {
  EXPECT_EQ(run.exit_code, exit_code);
  EXPECT_THAT(run.err, HasSubstr(what));
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "not one line: " << run.err;
}

TEST(EncorePlanToolTest, UnknownAlgorithm) {
  expect_one_line_error(run_tool("--algorithm=fastest " + write_temp("ok.csv", kExample)), "unknown algorithm", 2);
}

TEST(EncorePlanToolTest, MissingFile) {
  expect_one_line_error(run_tool("/nonexistent/problem.csv"), "cannot open");
}

TEST(EncorePlanToolTest, BadCsv) {
  const std::string path = write_temp("bad.csv", "id,lower,upper,size\nb1,0,3,4\nb2,5,1,4\n");
  expect_one_line_error(run_tool(path), "line 3");
}

// A problem the planner refuses (2^14 + 1 buffers of 2^48 bytes, the CSV's
// largest size: more than 2^62 in all) is one line on stderr and exit 1,
// with nothing on stdout: the table's header used to come out first, bare.
TEST(EncorePlanToolTest, ARefusedProblemPrintsNoTable) {
  std::string csv = "id,lower,upper,size\n";
  for (int i = 0; i <= 1 << 14; ++i) absl::StrAppend(&csv, "b", i, ",0,3,281474976710656\n");
  const ToolRun run = run_tool(write_temp("huge.csv", csv));
  expect_one_line_error(run, "above 2^62");
  EXPECT_EQ(run.out, "");
}

// A misspelt or made-up flag is a bad flag like any other: exit 2 and one
// line naming it, not Abseil's exit 1 (which here means bad input).
TEST(EncorePlanToolTest, UnknownFlagsAreFlagErrors) {
  const std::string csv = write_temp("flags.csv", kExample);
  expect_one_line_error(run_tool("--capacty=12 " + csv), "encore-plan: unknown flag '--capacty' (see --help)", 2);
  expect_one_line_error(run_tool("--nocapacity " + csv), "--nocapacity: only a true/false flag has a --no form", 2);
  // --undefok, Abseil's own, still lets a listed unknown flag through.
  EXPECT_EQ(run_tool("--undefok=capacty --capacty=12 " + csv).exit_code, 0);
  EXPECT_THAT(run_tool("--help").out + run_tool("--help").err, ::testing::Not(HasSubstr("unknown flag")));
}

// --version names the tool and encore's version, not how Abseil was built.
TEST(EncorePlanToolTest, VersionNamesTheTool) {
  const ToolRun run = run_tool("--version");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, ::testing::MatchesRegex("encore-plan [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST(EncorePlanToolTest, NoInputFile) { expect_one_line_error(run_tool(""), "expected one input CSV file", 2); }

// Hostile flag values: one line, exit 2 (issue #17).
TEST(EncorePlanToolTest, BadTimeLimitsAreRefused) {
  const std::string csv = write_temp("limits.csv", kExample);
  for (const char* v : {"nan", "inf", "-1", "1e300"}) {
    const ToolRun run = run_tool(std::string("--time_limit_s=") + v + " " + csv);
    EXPECT_EQ(run.exit_code, 2) << v;
    expect_one_line_error(run, "--time_limit_s must be a finite number in [0, 86400]", 2);
  }
  const ToolRun run = run_tool("--time_limit_s=soon " + csv);
  expect_one_line_error(run, "--time_limit_s: cannot parse 'soon' as a number", 2);
  // The same value as the next argument: exit 2 too, not Abseil's 1 (a bad input file's).
  const ToolRun separate = run_tool("--time_limit_s soon " + csv);
  expect_one_line_error(separate, "--time_limit_s: cannot parse 'soon' as a number", 2);
}

// A plan or picture that cannot be written: exit 1 naming the file (issue #17).
TEST(EncorePlanToolTest, WriteFailuresAreReported) {
  const std::string csv = write_temp("writes.csv", kExample);
  for (const char* flag : {"--out", "--svg"}) {
    if (std::ifstream("/dev/full").good()) {
      const ToolRun run = run_tool(std::string("--algorithm=greedy ") + flag + "=/dev/full " + csv);
      EXPECT_EQ(run.exit_code, 1) << flag;
      expect_one_line_error(run, std::string(flag) + ": cannot write /dev/full: No space left on device");
    }
    const ToolRun run = run_tool(std::string("--algorithm=greedy ") + flag + "=/nonexistent/dir/p " + csv);
    EXPECT_EQ(run.exit_code, 1) << flag;
    expect_one_line_error(run, std::string(flag) + ": cannot write /nonexistent/dir/p: cannot create");
    EXPECT_THAT(run.err, HasSubstr("No such file or directory")) << flag;
    // Refused before planning (up to --time_limit_s an algorithm): no table printed.
    EXPECT_EQ(run.out, "") << flag;
    const ToolRun directory = run_tool(std::string("--algorithm=greedy ") + flag + "=" + ::testing::TempDir() + " " + csv);
    expect_one_line_error(directory, "Is a directory");
    EXPECT_EQ(directory.out, "") << flag;
  }
}

// A plan or picture whose write fails part way (a file size limit of 1 KiB,
// as a full disk) leaves the previous file as it was and no temporary
// beside it (src/core/atomic_file.h).
TEST(EncorePlanToolTest, AFailedWriteKeepsThePreviousFile) {
  namespace fs = std::filesystem;
  std::string csv_text = "id,lower,upper,size\n";
  for (int i = 0; i < 100; ++i) absl::StrAppend(&csv_text, "b", i, ",0,1,4\n");   // plan and SVG over 1 KiB
  const std::string csv = write_temp("many.csv", csv_text);
  for (const char* flag : {"--out", "--svg"}) {
    const fs::path dir = temp_path("partial_output");
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string out = (dir / "p").string();
    std::ofstream(out) << "previous\n";
    // The shell ignores SIGXFSZ so that the write fails with EFBIG instead of killing the tool.
    const std::string limited = "trap '' XFSZ; ulimit -f 1; " + testing::tool_path("ENCORE_PLAN_BIN", ENCORE_PLAN_PATH);
    const ToolRun run = testing::run_tool(limited, std::string("--algorithm=greedy ") + flag + "=" + out + " " + csv,
                                          "encore_plan_");
    EXPECT_EQ(run.exit_code, 1) << flag << run.err;
    EXPECT_THAT(run.err, HasSubstr(std::string(flag) + ": cannot write " + out + ".tmp.")) << flag;
    EXPECT_THAT(run.err, HasSubstr("File too large")) << flag;
    EXPECT_EQ(slurp(out), "previous\n") << flag;
    std::vector<std::string> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
    EXPECT_EQ(files, std::vector<std::string>{"p"}) << flag;
    fs::remove_all(dir);
  }
}

// The probe of an output path neither empties an existing file nor leaves
// one behind when the plan fails.
TEST(EncorePlanToolTest, OutputProbeLeavesFilesAlone) {
  const std::string out = temp_path("kept.csv");
  std::ofstream(out) << "old";
  const std::string bad = write_temp("bad_rows.csv", "id,lower,upper,size\nb1,0,3,4\nb2,5,1,4\n");
  EXPECT_EQ(run_tool("--out=" + out + " " + bad).exit_code, 1);
  EXPECT_EQ(slurp(out), "old");
  // 2^14 + 1 buffers of 2^48 bytes: refused by plan_buffers (above 2^62 bytes), after the probe.
  std::string huge = "id,lower,upper,size\n";
  for (int i = 0; i <= (1 << 14); ++i) absl::StrAppend(&huge, "b", i, ",0,1,281474976710656\n");
  const std::string fresh = temp_path("fresh.csv");
  std::remove(fresh.c_str());
  const ToolRun failed = run_tool("--algorithm=naive --out=" + fresh + " " + write_temp("huge.csv", huge));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr("above 2^62"));
  EXPECT_FALSE(std::ifstream(fresh).good()) << "the probe left " << fresh;
}

TEST(EncorePlanToolTest, PrintsOneRowPerAlgorithm) {
  const ToolRun run = run_tool(write_temp("all.csv", kExample));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (Algorithm algorithm : all_algorithms()) {
    EXPECT_THAT(run.out, HasSubstr(std::string(algorithm_name(algorithm)) + " ")) << run.out;
  }
}

// The table goes through stdio's buffer, --out=/dev/stdout through the
// descriptor: into a pipe the plan came before the table.
TEST(EncorePlanToolTest, ThePlanOnStdoutComesAfterTheTable) {
  const std::string csv = write_temp("stdout_plan.csv", kExample);
  const ToolRun run = testing::run_tool("( " + testing::tool_path("ENCORE_PLAN_BIN", ENCORE_PLAN_PATH),
                                        "--algorithm=greedy --out=/dev/stdout " + csv + "; ) | cat", "encore_plan_");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_NE(run.out.find("id,lower,upper,size"), std::string::npos) << run.out;
  EXPECT_LT(run.out.find("algorithm"), run.out.find("id,lower,upper,size")) << run.out;
}

TEST(EncorePlanToolTest, WritesAValidPlanAndPicture) {
  const std::string input = write_temp("in.csv", kExample), out = temp_path("plan.csv"), svg = temp_path("plan.svg");
  const ToolRun run = run_tool("--algorithm=best --out=" + out + " --svg=" + svg + " " + input);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("best"));
  absl::StatusOr<CsvProblem> plan_file = read_csv(out);
  ASSERT_TRUE(plan_file.ok()) << plan_file.status();
  ASSERT_EQ(plan_file->offsets.size(), 5u);
  Plan plan{plan_file->offsets, 0};
  for (size_t i = 0; i < plan.offsets.size(); ++i) {
    plan.peak = std::max(plan.peak, plan.offsets[i] + plan_file->buffers[i].size);
  }
  EXPECT_TRUE(validate(plan_file->buffers, plan).ok());
  EXPECT_EQ(plan.peak, 12);
  const std::string picture = slurp(svg);
  EXPECT_THAT(picture, HasSubstr("<svg"));
  EXPECT_THAT(picture, HasSubstr("lower bound"));
  EXPECT_THAT(picture, HasSubstr("time step"));
  EXPECT_THAT(testing::svg_text_outside_view(picture), ::testing::IsEmpty());
}

// Long numbers on both axes: the margins grow with the tick labels, and the
// legend names both series (buffers, lower bound).
TEST(EncorePlanToolTest, PictureKeepsEveryTextInsideTheView) {
  for (int64_t scale : {int64_t{1}, int64_t{1000003}, int64_t{123456789013}}) {
    const std::vector<Buffer> buffers = {{"a", 0, 3 * 97 * scale / 7 + 1, 5 * scale},
                                         {"b<&>", 2, 987654321, 7 * scale},
                                         {"c", 5, 9, 3 * scale}};
    const Plan plan{{0, 5 * scale, 12 * scale}, 15 * scale};
    const std::string svg = render_svg(buffers, plan);
    EXPECT_THAT(testing::svg_text_outside_view(svg), ::testing::IsEmpty()) << "scale " << scale;
    EXPECT_THAT(svg, HasSubstr(">buffer ("));
    EXPECT_THAT(svg, HasSubstr(">lower bound</text>"));
  }
}

// Times and sizes near the ends of int64: the tick labels are the exact
// quarters of the ranges (computed naively, (t1 - t0) * k overflows and
// the labels wrap), and every text stays inside the view. The fuzzer's
// input (fuzz/planner_csv_fuzz) ended at 3722222222222222222.
TEST(EncorePlanToolTest, PictureOfTheWholeInt64Range) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  {
    const std::vector<Buffer> buffers = {{.id = "a", .size = 641, .lower = 0, .upper = 3722222222222222222},
                                         {.id = "b", .size = 3497, .lower = 5, .upper = 9}};
    const Plan plan{{0, 641}, 4138};
    const std::string svg = render_svg(buffers, plan);
    for (const char* label : {">930555555555555555<", ">1861111111111111111<", ">2791666666666666666<",
                              ">3722222222222222222<"}) {
      EXPECT_THAT(svg, HasSubstr(label));
    }
    EXPECT_THAT(testing::svg_text_outside_view(svg), ::testing::IsEmpty());
  }
  {
    const int64_t big = int64_t{1} << 61;
    const std::vector<Buffer> buffers = {{.id = "a", .size = big, .lower = kMin, .upper = kMax},
                                         {.id = "b", .size = big, .lower = -3, .upper = 4}};
    const Plan plan{{0, big}, 2 * big};   // 2^62 bytes
    const std::string svg = render_svg(buffers, plan);
    // Quarters of [INT64_MIN, INT64_MAX] (2^64 - 1 wide) and of 2^62 bytes.
    for (const char* label : {">-9223372036854775808<", ">-4611686018427387905<", ">-1<", ">4611686018427387903<",
                              ">9223372036854775807<", ">2305843009213693952<", ">4611686018427387904<"}) {
      EXPECT_THAT(svg, HasSubstr(label));
    }
    EXPECT_THAT(testing::svg_text_outside_view(svg), ::testing::IsEmpty());
  }
}

TEST(EncorePlanToolTest, HelpExplainsTheFlags) {
  const ToolRun run = run_tool("--help");
  const std::string text = run.out + run.err;
  for (const char* flag : {"algorithm", "time_limit_s", "capacity", "out", "svg"}) EXPECT_THAT(text, HasSubstr(flag));
}

// The example's optimum is 12 bytes, its lower bound too.
TEST(EncorePlanToolTest, SaysWhatExactProved) {
  const std::string input = write_temp("proof.csv", kExample);
  const ToolRun minimal = run_tool("--algorithm=exact " + input);
  ASSERT_EQ(minimal.exit_code, 0) << minimal.err;
  EXPECT_THAT(minimal.out, HasSubstr("optimal"));
  const ToolRun fits = run_tool("--algorithm=exact --capacity=12 " + input);
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_THAT(fits.out, HasSubstr("fits"));
  const ToolRun below = run_tool("--algorithm=exact --capacity=11 " + input);
  ASSERT_EQ(below.exit_code, 0) << below.err;
  EXPECT_THAT(below.out, HasSubstr("infeasible"));
}

// With no time, a plan of 5,000 buffers (10,000 events, past the first
// clock check at 4,096) is cut, and the row says so.
TEST(EncorePlanToolTest, SaysWhenTheLimitCutTheFirstPlan) {
  const std::vector<Buffer> buffers = training_step_trace({.num_buffers = 5'000, .seed = 2});
  const std::string input = write_temp("cut.csv", format_csv(buffers, nullptr, true));
  const ToolRun cut = run_tool("--algorithm=exact --time_limit_s=0 " + input);
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_THAT(cut.out, HasSubstr("time limit cut the first plan"));
  const ToolRun whole = run_tool("--algorithm=exact --time_limit_s=5 " + input);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_THAT(whole.out, ::testing::Not(HasSubstr("cut")));
}

}  // namespace
}  // namespace encore::planner
