// Eager dispatch overhead: how much a tiny op costs before any math happens.
//
//   build/bench/eager_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Reference (issue 2): libtorch 1.13 on this machine kind, one thread: 0.60 us
// per add without grad, 1.05 us with grad, 97 us for the 20-op chain with
// backward. Instruction counts (which repeat exactly) come from
// bench/eager_instructions.sh; see bench/RESULTS.md.
#include <benchmark/benchmark.h>

#include "bench/eager_workloads.h"
#include "encore/capture.h"
#include "encore/encore.h"

namespace encore {
namespace {

void BM_AddNoGrad(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_AddNoGrad);

void BM_AddWithGrad(benchmark::State& state) {
  Tensor a = ones({1}).requires_grad_(), b = ones({1}).requires_grad_();
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_AddWithGrad);

void BM_Chain20ForwardBackward(benchmark::State& state) {
  bench::Chain chain;
  for (auto _ : state) chain.step();
}
BENCHMARK(BM_Chain20ForwardBackward);

// The same chain captured: one replay per iteration; "per_node" is the time
// per graph node in seconds (a Google Benchmark inverted rate: the console
// prints it with an SI prefix, 8.3n = 8.3 ns; the JSON holds 8.3e-09).
void BM_Chain20Replay(benchmark::State& state) {
  bench::Chain chain;
  absl::StatusOr<Graph> graph = capture([&] {
    chain.step();
    return std::vector<Tensor>{};
  });
  if (!graph.ok()) {
    state.SkipWithError(std::string(graph.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    // A refused replay runs nothing and would time as a very fast one.
    if (absl::Status s = graph->replay(); !s.ok()) {
      state.SkipWithError(("replay: " + s.ToString()).c_str());
      return;
    }
  }
  state.counters["nodes"] = static_cast<double>(graph->stats().kernels);
  state.counters["per_node"] = benchmark::Counter(static_cast<double>(graph->stats().kernels) * state.iterations(),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Chain20Replay);

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
