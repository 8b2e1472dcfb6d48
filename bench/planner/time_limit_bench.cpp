// What a short time limit costs at scale: each fixed phase of plan_buffers
// (input checks, lower bound, online plan, validation) timed alone on one
// generated trace, then whole `exact` calls with short limits.
//
//   build/bench/planner/time_limit_bench [--num_buffers=1000000] [--limits=0,0.5,1] [--repeats=3]
//
// Prints the median of --repeats runs for each phase and each limit, wall
// clock and CPU time (one thread: on a loaded machine the CPU time is what a
// quiet one would take), with the plans' peak / lower bound and how many
// buffers the limit left to the stacked tail (Plan::stacked_by_limit): a
// time-limited search differs from run to run, so these two are the worst of
// the --repeats plans.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/synthetic.h"

ABSL_FLAG(int, num_buffers, 1'000'000, "Buffers in the generated training-step trace.");
ABSL_FLAG(std::string, limits, "0,0.5,1", "Time limits (s) of the whole `exact` calls, comma separated.");
ABSL_FLAG(int, repeats, 3, "Runs per figure; the median is printed.");
ABSL_FLAG(bool, transformer, false, "Use the transformer trace style instead of kLayers.");

namespace encore::planner {
namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double last_cpu = 0;  // the median CPU time of the last median_seconds() call

// The median wall time of `repeats` runs; last_cpu gets the median CPU time
// (what the figure would be on a quiet machine, one thread).
double median_seconds(int repeats, const std::function<void()>& body) {
  std::vector<double> times, cpu;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    body();
    cpu.push_back(cpu_seconds() - cpu_start);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu.begin(), cpu.end());
  last_cpu = cpu[cpu.size() / 2];
  return times[times.size() / 2];
}

void phase(const char* name, int repeats, const std::function<void()>& body) {
  const double wall = median_seconds(repeats, body);
  std::printf("%-28s %9.3f s wall %9.3f s CPU\n", name, wall, last_cpu);
}

int main_impl() {
  const int n = absl::GetFlag(FLAGS_num_buffers), repeats = absl::GetFlag(FLAGS_repeats);
  if (n < 1 || repeats < 1) {
    std::fprintf(stderr, "time_limit_bench: --num_buffers and --repeats must be >= 1\n");
    return 2;
  }
  std::vector<double> limits;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_limits), ',', absl::SkipEmpty())) {
    double limit = 0;
    if (!absl::SimpleAtod(text, &limit) || !(limit >= 0)) {
      std::fprintf(stderr, "time_limit_bench: --limits: '%s' is not a time limit in seconds\n",
                   std::string(text).c_str());
      return 2;
    }
    limits.push_back(limit);
  }
  const std::vector<Buffer> buffers = training_step_trace(
      {.num_buffers = n, .seed = 42,
       .style = absl::GetFlag(FLAGS_transformer) ? TraceStyle::kTransformer : TraceStyle::kLayers});
  int64_t bound = 0;
  Plan online;
  std::printf("%d buffers, median of %d\n", n, repeats);
  // A phase that fails would time a shortcut: stop with its message instead.
  const auto must = [](const absl::Status& s, const char* what) {
    if (!s.ok()) {
      std::fprintf(stderr, "time_limit_bench: %s: %s\n", what, std::string(s.message()).c_str());
      std::exit(1);
    }
  };
  phase("check_buffers", repeats, [&] { must(check_buffers(buffers), "check_buffers"); });
  std::vector<internal::TimeEvent> events;
  phase("event order (radix sort)", repeats, [&] { events = internal::time_ordered_events(buffers); });
  phase("lower bound sweep", repeats, [&] { bound = internal::lower_bound_of(buffers, events); });
  phase("online plan walk", repeats, [&] { online = internal::plan_online(buffers, events, nullptr); });
  phase("validation sweep", repeats, [&] { must(internal::validate_with(buffers, online, events), "validation"); });
  for (const double limit : limits) {
    int64_t worst_peak = 0, most_stacked = 0;
    const double s = median_seconds(repeats, [&] {
      const absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = Algorithm::kExact, .time_limit_s = limit});
      must(plan.status(), "exact");
      worst_peak = std::max(worst_peak, plan->peak);
      most_stacked = std::max(most_stacked, plan->stacked_by_limit);
    });
    std::printf("exact, limit %-6.2f s        %9.3f s wall %9.3f s CPU  worst peak / bound %.4f, %lld stacked\n",
                limit, s, last_cpu, static_cast<double>(worst_peak) / static_cast<double>(bound),
                static_cast<long long>(most_stacked));
  }
  return 0;
}

}  // namespace
}  // namespace encore::planner

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return encore::planner::main_impl();
}
