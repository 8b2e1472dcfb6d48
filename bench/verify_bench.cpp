// The cost of shadow verification (CaptureOptions::verify_every, NOTE
// [ Shadow verification ] in capture/graph.cpp): a replay that verifies
// itself runs the replay, an eager step and copies of the state, so its time
// is compared with a plain replay and with an eager step of a second
// instance of the model, all measured in the same run.
//
//   export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
//   build/bench/verify_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// Counters: "verified_vs_replay" = time of a verified replay / a plain
// replay; "verified_vs_eager" = the same over an eager step; the amortized
// cost of verify_every = K is (K - 1 + verified_vs_replay) / K plain replays.
#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <vector>

#include "bench/cpu_time.h"
#include "encore/encore.h"
#include "tools/workloads.h"

namespace encore {
namespace {

using bench::median_cpu_ms;

using Make = std::function<std::unique_ptr<tools::Workload>()>;

void check(const absl::Status& s, benchmark::State& state) {
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
}

// The benchmark loop times verified replays (verify_every = 1); the
// counters pair them with plain replays and eager steps measured after it.
void BM_VerifiedReplay(benchmark::State& state, const Make& make) {
  std::unique_ptr<tools::Workload> w = make(), plain = make(), eager = make();
  absl::StatusOr<Graph> verified = capture([&] { return w->step(); }, {.verify_every = 1});
  absl::StatusOr<Graph> graph = capture([&] { return plain->step(); });
  if (!verified.ok() || !graph.ok()) {
    state.SkipWithError("capture failed");
    return;
  }
  for (auto _ : state) check(verified->replay(), state);
  const double verified_ms = median_cpu_ms([&] { check(verified->replay(), state); }, 100);
  const double replay_ms = median_cpu_ms([&] { check(graph->replay(), state); }, 100);
  const double eager_ms = median_cpu_ms([&] { eager->step(); }, 100);
  state.counters["verified_ms"] = verified_ms;
  state.counters["replay_ms"] = replay_ms;
  state.counters["eager_ms"] = eager_ms;
  state.counters["verified_vs_replay"] = verified_ms / replay_ms;
  state.counters["verified_vs_eager"] = verified_ms / eager_ms;
}

Make mlp_of(int64_t hidden, int64_t batch) {
  return [=] { return tools::make_mlp({.widths = {32, hidden, hidden, 10}, .batch = batch}); };
}
Make gpt_of(int64_t layers, int64_t width, int64_t batch, int64_t seq) {
  return [=] {
    return tools::make_gpt({.config = {.vocab_size = 65, .block_size = seq, .n_layer = layers, .n_head = 4,
                                       .n_embd = width},
                            .batch = batch});
  };
}

BENCHMARK_CAPTURE(BM_VerifiedReplay, mlp_32_256_256_10_b64, mlp_of(256, 64))
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(BM_VerifiedReplay, demo_gpt_2x64_b16_t32, gpt_of(2, 64, 16, 32))
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
