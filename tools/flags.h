// Command-line flags for encore's tools: Abseil's parser, with every bad
// value reported the same way, as one line on stderr and exit status 2
// (never an abort), and range checks for the flags that size something.
//
//   int main(int argc, char** argv) {
//     std::vector<char*> args = encore::tools::parse_flags(argc, argv, "encore-prof");
//     absl::Status s = encore::tools::in_range("--runs", absl::GetFlag(FLAGS_runs), 1, 100000);
//     if (!s.ok()) return encore::tools::flag_error("encore-prof", s);   // "encore-prof: --runs must be ..."
//
// Abseil itself exits 1 on a value it cannot parse ("--runs=abc",
// "--runs 1e99"), a missing one ("--runs" last) or an unknown flag
// ("--rnus=3"), which the tools document as exit 1's other meaning (bad
// input, a failed write); parse_flags checks every flag first, in both
// forms, with the flag's own parser and exits 2 with "<tool>: --name: cannot
// parse 'abc' as <type>" (or "missing value", or "unknown flag '--rnus'",
// unless --undefok names it).
// Values Abseil parses but no tool wants (nan, inf, 0, huge sizes) are what
// in_range and finite_in_range refuse.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

// tools/meson.build defines it from the project's version.
#ifndef ENCORE_VERSION
#define ENCORE_VERSION "(unknown version)"
#endif

namespace encore::tools {

// Sets what --help and --version print: --help the flags of `source` (the
// tool's .cpp; Abseil matches files by program name, and ours have a dash)
// under `usage`; --version "<tool> <encore's version>" (Abseil's own line
// adds "Debug build (NDEBUG not #defined)" whenever the system's Abseil was
// built so, which says nothing of the tool).
inline void set_usage(const char* tool, const char* source, const char* usage) {
  absl::SetFlagsUsageConfig(
      {.contains_help_flags = [source](absl::string_view file) { return absl::StrContains(file, source); },
       .version_string = [tool] { return absl::StrCat(tool, " ", ENCORE_VERSION, "\n"); }});
  absl::SetProgramUsageMessage(usage);
}

// Prints "<tool>: <message>" and returns 2, the exit status of a bad flag.
inline int flag_error(const char* tool, const absl::Status& s) {
  std::fprintf(stderr, "%s: %s\n", tool, std::string(s.message()).c_str());
  return 2;
}

// absl::ParseCommandLine, after checking each flag (up to a "--") as
// Abseil reads it: "--name=value", or "--name value" (the next argument,
// whatever it is) for a flag that is not a bool, "--noname" for a bool; a
// value that does not parse, is missing, or a flag this program does not
// have exits 2. (A value that parses is set here and again, in order, by
// Abseil; so --undefok is known here once the loop has run.)
inline std::vector<char*> parse_flags(int argc, char** argv, const char* tool) {
  auto fail = [tool](const std::string& message) { std::exit(flag_error(tool, absl::InvalidArgumentError(message))); };
  std::vector<std::string> unknown;   // names, checked against --undefok after the loop
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "-" || !absl::ConsumePrefix(&arg, "-")) continue;   // positional, as for Abseil
    absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    // Abseil's usage flags (--help, --helpfull, --version, ...) are not in its registry.
    constexpr absl::string_view kUsageFlags[] = {"help",    "helpfull", "helpshort",       "helppackage",
                                                 "version", "helpon",   "only_check_args", "helpmatch"};
    if (std::find(std::begin(kUsageFlags), std::end(kUsageFlags), name) != std::end(kUsageFlags)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      absl::string_view positive = name;
      absl::CommandLineFlag* negated =
          absl::ConsumePrefix(&positive, "no") ? absl::FindCommandLineFlag(positive) : nullptr;
      if (negated == nullptr) {
        unknown.emplace_back(name);
      } else if (!negated->IsOfType<bool>()) {
        fail(absl::StrFormat("--%s: only a true/false flag has a --no form (--%s takes a value)", name, positive));
      } else if (eq != absl::string_view::npos) {
        fail(absl::StrFormat("--%s takes no value (write --%s=false)", name, positive));
      }
      continue;
    }
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;   // "--name" alone sets a bool; the next argument is not its value
    } else if (++i < argc) {
      value = argv[i];
    } else {
      fail(absl::StrFormat("--%s: missing value", flag->Name()));
    }
    std::string error;   // Abseil leaves it empty for numbers; the type says more
    if (!flag->ParseFrom(value, &error)) {
      const char* type = flag->IsOfType<bool>()                            ? "true or false"
                         : flag->IsOfType<double>()                        ? "a number"
                         : flag->IsOfType<std::string>()                   ? "a string"
                         : flag->IsOfType<std::vector<std::string>>()      ? "a comma-separated list"
                         : flag->IsOfType<uint64_t>()                      ? "an unsigned 64-bit integer"
                         : flag->IsOfType<int64_t>()                       ? "a 64-bit integer"
                         : flag->IsOfType<int32_t>()                       ? "a 32-bit integer"
                                                                           : "this flag's type";
      fail(absl::StrFormat("--%s: cannot parse '%s' as %s", flag->Name(), value, type));
    }
  }
  const absl::CommandLineFlag* undefok_flag = absl::FindCommandLineFlag("undefok");
  const std::vector<std::string> undefok =
      absl::StrSplit(undefok_flag != nullptr ? undefok_flag->CurrentValue() : "", ',', absl::SkipEmpty());
  for (const std::string& name : unknown) {
    if (std::find(undefok.begin(), undefok.end(), name) == undefok.end()) {
      fail(absl::StrFormat("unknown flag '--%s' (see --help)", name));
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

// OK when lo <= v <= hi, else "--flag must be in lo..hi, got v".
inline absl::Status in_range(absl::string_view flag, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("%s must be in %d..%d, got %d", flag, lo, hi, v));
}

// OK when v is finite and lo <= v <= hi (nan and inf are refused).
inline absl::Status finite_in_range(absl::string_view flag, double v, double lo, double hi) {
  if (std::isfinite(v) && v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("%s must be a finite number in [%g, %g], got %g", flag, lo, hi, v));
}

}  // namespace encore::tools
