// Planning time against problem size for the fast planner algorithms, on
// generated training-step traces (planner/synthetic.h). Each run reports the
// plan's quality as the counter peak_over_lb = peak / lower_bound.
//
//   build/bench/planner/planner_bench --benchmark_counters_tabular=true
//
// Times include what plan_buffers always does: checking the input and
// validating the plan.
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"
#include "encore/planner.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

// One trace per size, generated once and shared by every algorithm.
const std::vector<Buffer>& trace(int num_buffers) {
  static std::map<int, std::vector<Buffer>> traces;
  auto it = traces.find(num_buffers);
  if (it == traces.end()) {
    it = traces.emplace(num_buffers, training_step_trace({.num_buffers = num_buffers, .seed = 42})).first;
  }
  return it->second;
}

void plan_trace(benchmark::State& state, Algorithm algorithm) {
  const std::vector<Buffer>& buffers = trace(static_cast<int>(state.range(0)));
  const int64_t bound = lower_bound(buffers);
  int64_t peak = 0;
  for (auto _ : state) {
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm});
    if (!plan.ok()) {
      state.SkipWithError(std::string(plan.status().message()).c_str());
      return;
    }
    peak = plan->peak;
    benchmark::DoNotOptimize(peak);
  }
  state.counters["peak_over_lb"] = double(peak) / double(bound);
  state.counters["buffers"] = double(buffers.size());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(buffers.size()));
}

// CPU time is the whole process's: best_greedy uses two threads from 100,000
// buffers on.
void sizes(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->Arg(1'000)->Arg(10'000)->Arg(100'000)->Arg(1'000'000);
}

BENCHMARK_CAPTURE(plan_trace, naive, Algorithm::kNaive)->Apply(sizes);
BENCHMARK_CAPTURE(plan_trace, caching, Algorithm::kCaching)->Apply(sizes);
BENCHMARK_CAPTURE(plan_trace, online, Algorithm::kOnline)->Apply(sizes);
BENCHMARK_CAPTURE(plan_trace, greedy, Algorithm::kGreedy)->Apply(sizes);
BENCHMARK_CAPTURE(plan_trace, best_greedy, Algorithm::kBestGreedy)->Apply(sizes);

}  // namespace
}  // namespace encore::planner

BENCHMARK_MAIN();
