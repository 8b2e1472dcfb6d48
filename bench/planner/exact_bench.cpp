// The exact search on MiniMalloc-like problems: the challenging files and
// instances of planner/synthetic.h's challenging_problem.
//
//   build/bench/planner/exact_bench [--dir=DIR] [--seeds=20] [--time_limit_s=10] [--grid_sizes=70,75]
//                                   [--like_seeds=100] [--like_first_seed=1] [--minimise=false]
//
// For each problem, two runs of plan_buffers: `exact` deciding the capacity
// 2^20 (MiniMalloc's question; its published times are 0.6-5.4 s), and
// `exact` minimising the peak (the minimal capacity, proven or not; skipped
// with --minimise=false). Prints one row per problem and one summary row per
// family: counts fit and proven infeasible at 2^20, median and largest time,
// proven optimal and peak / lower bound when minimising. DIR holds *.1048576.csv files (default
// $ENCORE_SHARED_DIR/data/minimalloc; the eleven of google/minimalloc's
// benchmarks/challenging can be given instead). Times are wall clock on one
// thread (what the limit counts), with the CPU time of the decision beside
// it: on a loaded machine, what a quiet one would take.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/planner.h"
#include "planner/synthetic.h"

ABSL_FLAG(std::string, dir, "", "Folder of *.1048576.csv problems (default: $ENCORE_SHARED_DIR/data/minimalloc).");
ABSL_FLAG(int, seeds, 20, "Generated instances per size (sizes 150, 250, 400 buffers).");
ABSL_FLAG(double, time_limit_s, 10, "Time limit per run, seconds.");
ABSL_FLAG(std::string, grid_sizes, "",
          "Sizes (buffers, comma separated) of the generated grid: drop 0/15/30 % x shrink 0/30/60 % x 4 seeds, "
          "36 instances per size (the family of tests/planner's ExactOnGeneratedTest).");

ABSL_FLAG(int, like_seeds, 0,
          "Instances of minimalloc_like_problem (the files' character: 150-450 buffers, NOTE [ Largest-first cuts ] in "
          "planner/synthetic.h), seeds like_first_seed, like_first_seed + 1, ...");
ABSL_FLAG(int, like_first_seed, 1, "First seed of the minimalloc_like_problem instances.");
ABSL_FLAG(bool, minimise, true, "Also run `exact` minimising the peak (off: only the question at 2^20).");

namespace encore::planner {
namespace {

constexpr int64_t kCapacity = int64_t{1} << 20;

struct Run {
  Plan plan;
  double seconds = 0;  // wall clock (what the limit counts)
  double cpu = 0;      // CPU time: the wall time of a quiet machine (one thread)
};

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

Run run(const std::vector<Buffer>& buffers, int64_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  absl::StatusOr<Plan> plan = plan_buffers(
      buffers, {.algorithm = Algorithm::kExact, .time_limit_s = absl::GetFlag(FLAGS_time_limit_s), .capacity = capacity});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!plan.ok()) {
    absl::FPrintF(stderr, "exact_bench: %s\n", plan.status().ToString());
    std::exit(1);
  }
  return {*std::move(plan), seconds, cpu_seconds() - cpu_start};
}

struct Family {
  std::string name;
  int problems = 0, fits = 0, infeasible = 0, optimal = 0;
  std::vector<double> fit_s, min_s, fit_cpu;
  double worst_ratio = 1;  // minimised peak / lower bound
  double ratio_sum = 0;

  void print(bool minimised) const {
    if (problems == 0) return;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    auto largest = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
    absl::PrintF("%-24s %3d problems | capacity 2^20: %3d fit, %3d proven infeasible, median %.3f s, max %.3f s "
                 "(CPU max %.3f s)",
                 name, problems, fits, infeasible, median(fit_s), largest(fit_s), largest(fit_cpu));
    if (minimised) {
      absl::PrintF(" | minimal: %3d proven optimal, median %.3f s, max %.3f s, worst peak/lb %.4f, mean %.4f", optimal,
                   median(min_s), largest(min_s), worst_ratio, ratio_sum / problems);
    }
    absl::PrintF("\n");
  }
};

void measure(const std::string& name, const std::vector<Buffer>& buffers, Family& family) {
  const int64_t bound = lower_bound(buffers);
  const Run fit = run(buffers, kCapacity);
  const bool fits = fit.plan.peak <= kCapacity, infeasible = fit.plan.peak_floor > kCapacity;
  absl::PrintF("%-16s %4d buffers lb %8d | 2^20: %-10s %8.3f s (CPU %.3f s)", name, buffers.size(), bound,
               fits ? "fits" : infeasible ? "infeasible" : "not found", fit.seconds, fit.cpu);
  ++family.problems;
  family.fits += fits;
  family.infeasible += infeasible;
  family.fit_s.push_back(fit.seconds);
  family.fit_cpu.push_back(fit.cpu);
  if (!absl::GetFlag(FLAGS_minimise)) {  // only the question at 2^20
    absl::PrintF("\n");
    return;
  }
  const Run min = run(buffers, 0);
  const bool optimal = min.plan.peak == min.plan.peak_floor;
  const double ratio = double(min.plan.peak) / double(bound);
  absl::PrintF(" | minimal: peak %8d (%.4f x lb) %8.3f s (CPU %.3f s) %s\n", min.plan.peak, ratio, min.seconds,
               min.cpu, optimal ? "optimal" : absl::StrCat("floor ", min.plan.peak_floor));
  family.optimal += optimal;
  family.min_s.push_back(min.seconds);
  family.worst_ratio = std::max(family.worst_ratio, ratio);
  family.ratio_sum += ratio;
}

int main_(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_seeds) < 0 || absl::GetFlag(FLAGS_like_seeds) < 0 ||
      !(absl::GetFlag(FLAGS_time_limit_s) >= 0)) {
    absl::FPrintF(stderr, "exact_bench: --seeds, --like_seeds and --time_limit_s must be >= 0\n");
    return 2;
  }
  std::vector<int> grid_sizes;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_grid_sizes), ',', absl::SkipEmpty())) {
    int size = 0;
    if (!absl::SimpleAtoi(text, &size) || size < 1) {
      absl::FPrintF(stderr, "exact_bench: --grid_sizes: '%s' is not a buffer count\n", text);
      return 2;
    }
    grid_sizes.push_back(size);
  }
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (!dir.empty() && !std::filesystem::is_directory(dir)) {   // asked for by name: it must be there
    absl::FPrintF(stderr, "exact_bench: --dir=%s is not a folder\n", dir);
    return 2;
  }
  if (dir.empty() && std::getenv("ENCORE_SHARED_DIR") != nullptr) {
    dir = std::string(std::getenv("ENCORE_SHARED_DIR")) + "/data/minimalloc";
    if (!std::filesystem::is_directory(dir)) {
      absl::FPrintF(stderr, "exact_bench: no folder %s: the MiniMalloc files are left out\n", dir);
      dir.clear();
    }
  }
  std::vector<Family> families;
  if (!dir.empty()) {
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (absl::EndsWith(entry.path().string(), ".1048576.csv")) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    Family& family = families.emplace_back(Family{.name = "minimalloc " + dir});
    for (const std::string& file : files) {
      absl::StatusOr<CsvProblem> problem = read_csv(file);
      if (!problem.ok()) {   // a problem left out silently would change the family's counts
        absl::FPrintF(stderr, "exact_bench: %s: %s\n", file, problem.status().ToString());
        return 1;
      }
      measure(std::filesystem::path(file).filename().string(), problem->buffers, family);
    }
  }
  for (int size : {150, 250, 400}) {
    Family& family = families.emplace_back(Family{.name = absl::StrCat("challenging_problem n=", size)});
    for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
      measure(absl::StrCat("gen n=", size, " s=", seed),
              challenging_problem({.num_buffers = size, .seed = static_cast<uint64_t>(seed)}), family);
    }
  }
  if (absl::GetFlag(FLAGS_like_seeds) > 0) {
    Family& family = families.emplace_back(Family{.name = "minimalloc_like_problem"});
    const int first = absl::GetFlag(FLAGS_like_first_seed);
    for (int seed = first; seed < first + absl::GetFlag(FLAGS_like_seeds); ++seed) {
      measure(absl::StrCat("like #", seed), minimalloc_like_problem(static_cast<uint64_t>(seed)), family);
    }
  }
  for (const int size : grid_sizes) {
    Family& family = families.emplace_back(Family{.name = absl::StrCat("grid n=", size)});
    for (int drop : {0, 15, 30}) {
      for (int shrink : {0, 30, 60}) {
        for (int seed = 1; seed <= 4; ++seed) {
          measure(absl::StrCat("grid n=", size, " d", drop, " s", shrink, " #", seed),
                  challenging_problem({.num_buffers = size, .seed = static_cast<uint64_t>(seed),
                                       .drop_percent = drop, .shrink_percent = shrink}),
                  family);
        }
      }
    }
  }
  absl::PrintF("\n");
  for (const Family& family : families) family.print(absl::GetFlag(FLAGS_minimise));
  return 0;
}

}  // namespace
}  // namespace encore::planner

int main(int argc, char** argv) { return encore::planner::main_(argc, argv); }
