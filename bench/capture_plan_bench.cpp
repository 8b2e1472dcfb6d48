// How much of capture() is planning (issue #20: below 5 %, with the arena at
// the lower bound), on the demo GPT of examples/train_gpt.cpp and on a
// 12-layer GPT step. Per model: the median over five capture() calls of the
// whole call and of its planning phase (CaptureStats::plan_ms), the arena
// against the lower bound of the recorded lifetimes, and the number of
// temporaries planned; and planner_ms, plan_buffers alone (`best`) on the
// graph's recorded buffers, which tells the planner's share of plan_ms from
// capture's own work around it (building the buffers, the arena layout).
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/capture_plan_bench
//
// Wall clock (steady_clock) around capture(); one thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "encore/encore.h"
#include "tools/workloads.h"

namespace {

struct Model {
  const char* name;
  encore::tools::GptSpec spec;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const Model models[] = {
      {"demo gpt 2x64, b16 t32", {}},
      {"gpt 12x128, b8 t64",
       {.config = {.vocab_size = 65, .block_size = 64, .n_layer = 12, .n_head = 4, .n_embd = 128}, .batch = 8}},
  };
  std::printf("%-26s %8s %12s %10s %8s %11s %14s %14s %8s\n", "model", "temps", "capture_ms", "plan_ms", "plan_%",
              "planner_ms",
              "arena_bytes", "lower_bound", "ratio");
  for (const Model& m : models) {
    std::unique_ptr<encore::tools::Workload> w = encore::tools::make_gpt(m.spec);
    std::vector<double> total_ms, plan_ms, planner_ms;
    encore::CaptureStats stats;
    for (int run = 0; run < 5; ++run) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<encore::Graph> graph = encore::capture([&] { return w->step(); });
      total_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      if (!graph.ok()) {
        std::fprintf(stderr, "capture_plan_bench: %s\n", graph.status().ToString().c_str());
        return 1;
      }
      stats = graph->stats();
      plan_ms.push_back(stats.plan_ms);
      const auto plan_start = std::chrono::steady_clock::now();
      absl::StatusOr<encore::planner::Plan> plan = encore::planner::plan_buffers(graph->buffers());
      planner_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - plan_start).count());
      if (!plan.ok()) {
        std::fprintf(stderr, "capture_plan_bench: plan_buffers: %s\n", plan.status().ToString().c_str());
        return 1;
      }
    }
    const double total = median(total_ms), plan = median(plan_ms);
    std::printf("%-26s %8lld %12.2f %10.3f %7.2f%% %11.3f %14lld %14lld %8.4f\n", m.name,
                (long long)stats.temporaries, total, plan, 100 * plan / total, median(planner_ms), (long long)stats.arena_bytes, (long long)stats.lower_bound_bytes,
                double(stats.arena_bytes) / double(stats.lower_bound_bytes));
  }
  return 0;
}
