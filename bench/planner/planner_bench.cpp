// Planning time against problem size for the planner algorithms, on
// generated training-step traces (planner/synthetic.h), and `best` with the
// budget of issue #20 (1 s up to 10^5 buffers, 10 s for 10^6). The exact
// search on MiniMalloc-like problems is exact_bench.cpp. Each run reports the
// plan's quality as the counter peak_over_lb = peak / lower_bound, the worst
// (largest) peak of its iterations: `best` under its time limit may return a
// different plan each time.
//
//   build/bench/planner/planner_bench --benchmark_counters_tabular=true
//
// Times include what plan_buffers always does: checking the input and
// validating the plan.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"
#include "encore/planner.h"
#include "planner/synthetic.h"

namespace encore::planner {
namespace {

// One trace per size and style, generated once and shared by every algorithm.
const std::vector<Buffer>& trace(int num_buffers, TraceStyle style = TraceStyle::kLayers) {
  static std::map<std::pair<int, TraceStyle>, std::vector<Buffer>> traces;
  auto it = traces.find({num_buffers, style});
  if (it == traces.end()) {
    it = traces.emplace(std::pair{num_buffers, style},
                        training_step_trace({.num_buffers = num_buffers, .seed = 42, .style = style}))
             .first;
  }
  return it->second;
}

void plan_trace(benchmark::State& state, Algorithm algorithm, TraceStyle style = TraceStyle::kLayers) {
  const std::vector<Buffer>& buffers = trace(static_cast<int>(state.range(0)), style);
  const int64_t bound = lower_bound(buffers);
  // `best` gets the budget: 1 s up to 10^5 buffers, 10 s above.
  const double limit = buffers.size() > 100'000 ? 10 : 1;
  int64_t peak = 0;
  for (auto _ : state) {
    absl::StatusOr<Plan> plan = plan_buffers(buffers, {.algorithm = algorithm, .time_limit_s = limit});
    if (!plan.ok()) {
      state.SkipWithError(std::string(plan.status().message()).c_str());
      return;
    }
    peak = std::max(peak, plan->peak);
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
BENCHMARK_CAPTURE(plan_trace, best, Algorithm::kBest)->Apply(sizes);
// Transformer-style traces (checkpointing, gradient accumulation), where
// greedy misses the lower bound and `best` repacks the peak region.
BENCHMARK_CAPTURE(plan_trace, transformer_online, Algorithm::kOnline, TraceStyle::kTransformer)->Apply(sizes);
BENCHMARK_CAPTURE(plan_trace, transformer_greedy, Algorithm::kGreedy, TraceStyle::kTransformer)->Apply(sizes);
BENCHMARK_CAPTURE(plan_trace, transformer_best, Algorithm::kBest, TraceStyle::kTransformer)->Apply(sizes);

}  // namespace
}  // namespace encore::planner

BENCHMARK_MAIN();
