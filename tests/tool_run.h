// Running a built command-line tool from a test as a user would: its exit
// status, stdout and stderr. Header-only: the planner's tests link no encore
// library.
//
//   const std::string bin = testing::tool_path("ENCORE_PLAN_BIN", ENCORE_PLAN_PATH);
//   testing::ToolRun run = testing::run_tool(bin, "--help", "encore_plan_");
//   EXPECT_EQ(run.exit_code, 0);
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace encore::testing {

struct ToolRun {
  int exit_code;   // -1 when the tool did not exit normally
  std::string out;
  std::string err;
};

// The whole file (empty when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A path in the test's temporary folder: prefix + name.
inline std::string temp_path(const std::string& prefix, const std::string& name) {
  return ::testing::TempDir() + "/" + prefix + name;
}

// The tool's path: $env when set (a build folder moved to another machine,
// bench/gpu-check), else the path the build gave.
inline std::string tool_path(const char* env, const char* built) {
  const char* override_path = std::getenv(env);
  return override_path != nullptr ? override_path : built;
}

// Runs `binary args` through the shell; stdout and stderr go through files
// named with `prefix` in the temporary folder.
inline ToolRun run_tool(const std::string& binary, const std::string& args, const std::string& prefix) {
  const std::string out = temp_path(prefix, "stdout"), err = temp_path(prefix, "stderr");
  const int status = std::system((binary + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

}  // namespace encore::testing
