// include/encore/progress.h: plain lines into a pipe or file, lines redrawn
// in place on a terminal, and the figures in them.
#include "encore/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

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
  EXPECT_EQ(Progress::duration(1.0 / 0.0), "0s");
}

TEST(ProgressTest, BadOptionsAreRefused) {
  EXPECT_THROW(Progress({.every = 0}), Error);
  EXPECT_THROW(Progress({.total = -1}), Error);
  EXPECT_THROW(Progress({.out = nullptr}), Error);
}

}  // namespace
}  // namespace encore
