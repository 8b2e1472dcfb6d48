// include/encore/progress.h: plain lines into a pipe or file, lines redrawn
// in place on a terminal, and the figures in them.
#include "encore/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

#include "encore/error.h"

namespace encore {
namespace {

// What a Progress wrote into a temporary file.
std::string written(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s.push_back(static_cast<char>(c));
  return s;
}

int count(const std::string& s, char c) { return static_cast<int>(std::count(s.begin(), s.end(), c)); }

TEST(ProgressTest, IntoAFileOnePlainLineEveryNStepsAndAtTheLast) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p({.total = 25, .every = 10, .unit = "tokens", .label = "train", .out = f});   // a file: not a terminal
  for (int64_t s = 1; s <= 25; ++s) p.update(s, 2.5, 100);
  const std::string out = written(f);
  std::fclose(f);
  EXPECT_EQ(count(out, '\n'), 3) << out;   // steps 10, 20 and 25
  EXPECT_EQ(count(out, '\r'), 0) << out;
  EXPECT_NE(out.find("train step 10/25  loss 2.5000  "), std::string::npos) << out;
  EXPECT_NE(out.find("train step 25/25"), std::string::npos) << out;
  EXPECT_NE(out.find(" tokens/s  ETA 0s\n"), std::string::npos) << out;
}

TEST(ProgressTest, OnATerminalTheLineIsRedrawnInPlaceAndKeptEveryNSteps) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p({.total = 6, .every = 3, .out = f, .tty = 1, .redraw_s = 0});
  for (int64_t s = 1; s <= 6; ++s) p.update(s, 1.0, 1);
  const std::string out = written(f);
  std::fclose(f);
  EXPECT_EQ(count(out, '\r'), 6) << out;    // every step redrawn (redraw_s = 0)
  EXPECT_EQ(count(out, '\n'), 2) << out;    // kept at steps 3 and 6
  EXPECT_EQ(p.last_line().rfind("step 6/6", 0), 0u) << p.last_line();
}

TEST(ProgressTest, ALineWithoutALossForTools) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p({.total = 4, .every = 4, .unit = "points", .label = "encore-launch", .out = f});
  for (int64_t s = 1; s <= 4; ++s) p.update(s, 1);
  const std::string out = written(f);
  std::fclose(f);
  EXPECT_EQ(count(out, '\n'), 1) << out;
  EXPECT_EQ(out.find("loss"), std::string::npos) << out;
  EXPECT_EQ(out.rfind("encore-launch step 4/4  ", 0), 0u) << out;
  EXPECT_NE(out.find(" points/s  ETA 0s\n"), std::string::npos) << out;
}

TEST(ProgressTest, DurationsReadAsHoursMinutesSeconds) {
  EXPECT_EQ(Progress::duration(0), "0s");
  EXPECT_EQ(Progress::duration(42.4), "42s");
  EXPECT_EQ(Progress::duration(185), "3m05s");
  EXPECT_EQ(Progress::duration(3720), "1h02m");
  EXPECT_EQ(Progress::duration(-3), "0s");
}

// Past what a count of seconds holds, a duration still reads sensibly:
// 100000 hours or more (infinity: no progress) as ">99999h", NaN (no
// estimate) as "?", minus infinity as "0s", like any negative duration.
TEST(ProgressTest, DurationsTooLongOrUnknownReadAsSuch) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(Progress::duration(99999.0 * 3600 + 3599), "99999h59m");
  EXPECT_EQ(Progress::duration(100000.0 * 3600), ">99999h");
  EXPECT_EQ(Progress::duration(9.3e18), ">99999h");   // past int64's seconds
  EXPECT_EQ(Progress::duration(1e300), ">99999h");
  EXPECT_EQ(Progress::duration(inf), ">99999h");
  EXPECT_EQ(Progress::duration(std::nan("")), "?");
  EXPECT_EQ(Progress::duration(-inf), "0s");
}

// Seconds in an "ETA 3m05s" of `line`.
double eta_s(const std::string& line) {
  const size_t at = line.find("ETA ");
  EXPECT_NE(at, std::string::npos) << line;
  int a = 0, b = 0;
  char u1 = 0, u2 = 0;
  const int n = std::sscanf(line.c_str() + at + 4, "%d%c%d%c", &a, &u1, &b, &u2);
  if (n >= 4 && u1 == 'h') return a * 3600.0 + b * 60;
  if (n >= 4 && u1 == 'm') return a * 60.0 + b;
  return a;
}

// NOTE [ Rates from the first step seen ] (src/io/progress.cpp): a run
// resumed at step 9001 of 10000 whose steps take 20 ms has about 20 s left,
// not the 0 s that dividing by 9005 steps gave.
TEST(ProgressTest, AResumedRunEstimatesFromItsOwnSteps) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p({.total = 10000, .every = 1, .out = f});
  for (int64_t s = 9001; s <= 9005; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.update(s, 1.0, 100);
  }
  std::fclose(f);
  EXPECT_GE(eta_s(p.last_line()), 19) << p.last_line();   // 995 steps of >= 20 ms
  EXPECT_LT(eta_s(p.last_line()), 3600) << p.last_line();
}

// Units are counts: negative ones are refused, and counts whose sum passes
// int64 still give a positive throughput.
TEST(ProgressTest, NegativeUnitsAreRefusedAndHugeOnesDoNotOverflow) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p({.total = 4, .every = 1, .unit = "tokens", .out = f});
  EXPECT_THROW(p.update(1, 1.0, -5), Error);
  const int64_t max = std::numeric_limits<int64_t>::max();
  p.update(1, 1.0, max);
  p.update(2, 1.0, max);
  std::fclose(f);
  EXPECT_EQ(p.last_line().find(" -"), std::string::npos) << p.last_line();
  EXPECT_NE(p.last_line().find(" tokens/s"), std::string::npos) << p.last_line();
}

TEST(ProgressTest, BadOptionsAreRefused) {
  EXPECT_THROW(Progress({.every = 0}), Error);
  EXPECT_THROW(Progress({.total = -1}), Error);
  EXPECT_THROW(Progress({.out = nullptr}), Error);
}

}  // namespace
}  // namespace encore
