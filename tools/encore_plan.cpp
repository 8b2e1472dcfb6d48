// encore-plan: plan a CSV of buffers with each algorithm and compare.
//
//   encore-plan [--algorithm=NAME] [--time_limit_s=S] [--capacity=BYTES]
//               [--out=PLAN.csv] [--svg=PLAN.svg] FILE.csv
//
// Prints one row per algorithm: name, peak bytes, lower bound, peak / lower
// bound, planning time, and what is proven: "optimal" when the peak equals
// the proven floor (always so at the lower bound), otherwise the floor the
// search proved. By default `exact` and `best` look for the minimal capacity;
// with --capacity they decide that one capacity (MiniMalloc's question) and
// say "fits", "infeasible" (proven) or "unknown" (out of time). --out and
// --svg use the last algorithm run (the chosen one, or `best` when all run).
// Exits 1 with a one-line message on bad input or a failed write (an --out
// or --svg path that cannot be opened is refused before planning), 2 on bad
// flags (a value that does not parse or is out of range, an unknown
// algorithm, a missing or extra file argument). A row ends "(time limit cut the first plan: N buffers
// stacked)" when the limit ran out before the first plan was made whole
// (Plan::stacked_by_limit).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/planner.h"
#include "src/core/atomic_file.h"
#include "tools/flags.h"

ABSL_FLAG(std::string, algorithm, "all",
          "Algorithm to run: naive, caching, online, greedy, best_greedy, exact, best, or all (every one, in "
          "that order).");
ABSL_FLAG(double, time_limit_s, 0.5, "Time limit in seconds for the searching algorithms (exact, best), 0..86400.");
ABSL_FLAG(int64_t, capacity, 0,
          "Bytes. For exact and best: decide whether the buffers fit in this capacity instead of minimising the "
          "peak (0: find the minimal capacity).");
ABSL_FLAG(std::string, out, "", "If set, write the plan as CSV here: the input's columns plus `offset`.");
ABSL_FLAG(std::string, svg, "", "If set, draw the plan as SVG here (time across, address up).");

namespace {

using encore::planner::Algorithm;
using encore::planner::Plan;

absl::StatusOr<std::vector<Algorithm>> chosen_algorithms() {
  const std::string name = absl::GetFlag(FLAGS_algorithm);
  if (name == "all") {
    auto all = encore::planner::all_algorithms();
    return std::vector<Algorithm>(all.begin(), all.end());
  }
  absl::StatusOr<Algorithm> algorithm = encore::planner::parse_algorithm(name);
  if (!algorithm.ok()) return algorithm.status();
  return std::vector<Algorithm>{*algorithm};
}

// --out and --svg: whole or not at all (src/core/atomic_file.h; /dev/stdout
// and pipes written in place), so a failed write keeps the previous plan.
constexpr encore::WriteMode kOutput = encore::WriteMode::kAtomicWherePossible;

absl::Status write_outputs(const encore::planner::CsvProblem& problem, const Plan& plan) {
  // The table goes through stdio's buffer, an output to /dev/stdout through
  // the descriptor: the table first, whole.
  std::fflush(stdout);
  if (const std::string path = absl::GetFlag(FLAGS_out); !path.empty()) {
    const std::string csv = encore::planner::format_csv(problem.buffers, &plan, problem.has_alignment);
    if (absl::Status status = encore::write_file_atomically("--out", path, csv, kOutput); !status.ok()) return status;
  }
  if (const std::string path = absl::GetFlag(FLAGS_svg); !path.empty()) {
    return encore::write_file_atomically("--svg", path, encore::planner::render_svg(problem.buffers, plan), kOutput);
  }
  return absl::OkStatus();
}

// What a plan proves, for the last column.
std::string proven(const Plan& plan, int64_t capacity, bool searched) {
  if (capacity > 0 && searched) {
    if (plan.peak <= capacity) return "fits";
    return plan.peak_floor > capacity ? "infeasible" : "unknown";
  }
  if (plan.peak == plan.peak_floor) return "optimal";
  return searched ? absl::StrCat("floor ", plan.peak_floor) : "-";
}

absl::Status run(const std::string& path) {
  absl::StatusOr<std::vector<Algorithm>> algorithms = chosen_algorithms();
  if (!algorithms.ok()) return algorithms.status();
  absl::StatusOr<encore::planner::CsvProblem> problem = encore::planner::read_csv(path);
  if (!problem.ok()) return problem.status();
  if (absl::Status status = encore::planner::check_buffers(problem->buffers); !status.ok()) return status;
  // Probed before planning, which may take up to --time_limit_s per
  // algorithm: a path that cannot be written is refused at once. The probe
  // leaves an existing file as it was and creates none.
  for (const auto& [flag, output] : {std::pair{"--out", absl::GetFlag(FLAGS_out)},
                                     std::pair{"--svg", absl::GetFlag(FLAGS_svg)}}) {
    if (output.empty()) continue;
    if (absl::Status status = encore::check_writable(flag, output, kOutput); !status.ok()) return status;
  }
  const int64_t bound = encore::planner::lower_bound(problem->buffers);
  const int64_t capacity = absl::GetFlag(FLAGS_capacity);
  // The header comes with the first row: a problem plan_buffers refuses
  // leaves stdout empty (the error is on stderr).
  auto print_header = [&, printed = false]() mutable {
    if (std::exchange(printed, true)) return;
    absl::PrintF("%-12s %14s %14s %10s %12s  %s\n", "algorithm", "peak_bytes", "lower_bound", "ratio", "time_ms",
                 capacity > 0 ? absl::StrCat("capacity ", capacity) : std::string("proven"));
  };
  Plan plan;
  for (Algorithm algorithm : *algorithms) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Plan> planned = encore::planner::plan_buffers(
        problem->buffers,
        {.algorithm = algorithm, .time_limit_s = absl::GetFlag(FLAGS_time_limit_s), .capacity = capacity});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!planned.ok()) return planned.status();
    plan = *std::move(planned);
    const bool searched = algorithm == Algorithm::kExact || algorithm == Algorithm::kBest;
    const std::string cut = plan.stacked_by_limit > 0
                                ? absl::StrCat(" (time limit cut the first plan: ", plan.stacked_by_limit,
                                               " buffers stacked)")
                                : std::string();
    print_header();
    absl::PrintF("%-12s %14d %14d %10.4f %12.2f  %s%s\n", encore::planner::algorithm_name(algorithm), plan.peak,
                 bound, bound > 0 ? double(plan.peak) / double(bound) : 1.0, ms, proven(plan, capacity, searched),
                 cut);
  }
  return write_outputs(*problem, plan);
}

}  // namespace

int main(int argc, char** argv) {
  encore::tools::set_usage(
      "encore-plan", "encore_plan.cpp",
      "Plans the buffers of a MiniMalloc-format CSV (id,lower,upper,size[,alignment]) into one arena\n"
      "and prints, per algorithm, the peak, the lower bound, their ratio, the planning time and what is\n"
      "proven (optimal, or the floor proven; with --capacity: fits, infeasible or unknown).\n"
      "Usage: encore-plan [--algorithm=NAME] [--time_limit_s=S] [--capacity=BYTES] [--out=PLAN.csv]\n"
      "                   [--svg=PLAN.svg] FILE.csv");
  std::vector<char*> args = encore::tools::parse_flags(argc, argv, "encore-plan");
  if (args.size() != 2) {
    std::fprintf(stderr, "encore-plan: expected one input CSV file (see --help)\n");
    return 2;
  }
  if (absl::Status s = encore::tools::finite_in_range("--time_limit_s", absl::GetFlag(FLAGS_time_limit_s), 0, 86400);
      !s.ok()) {
    return encore::tools::flag_error("encore-plan", s);
  }
  if (absl::GetFlag(FLAGS_capacity) < 0) {
    std::fprintf(stderr, "encore-plan: --capacity must be >= 0 bytes (0: find the minimal capacity)\n");
    return 2;
  }
  if (absl::Status s = chosen_algorithms().status(); !s.ok()) return encore::tools::flag_error("encore-plan", s);
  if (absl::Status status = run(args[1]); !status.ok()) {
    std::fprintf(stderr, "encore-plan: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
