// Replay time by planner algorithm: the same training step captured once per
// algorithm (CaptureOptions::planner), the graphs replayed in turn, round by
// round, so every plan sees the same machine. Memory is not the only cost of
// a plan: where a temporary lands decides whether its first writes hit cache
// lines a just-freed temporary left warm. Per model and algorithm it prints
// the arena against the lower bound and the median replay CPU time against
// `best`'s (the default) and against the eager step, measured in the same
// rounds.
//
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/plan_locality_bench [ROUNDS]
//
// Process CPU time (bench/cpu_time.h); ROUNDS defaults to 40.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "bench/cpu_time.h"
#include "encore/encore.h"
#include "tools/workloads.h"

namespace {

using encore::bench::cpu_now_ms;
using encore::planner::Algorithm;

struct Model {
  const char* name;
  std::function<std::unique_ptr<encore::tools::Workload>()> make;
};

struct Plan {
  const char* name;
  Algorithm algorithm;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double time_ms(const std::function<void()>& fn) {
  const double t0 = cpu_now_ms();
  fn();
  return cpu_now_ms() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace encore;
  int rounds = 40;
  bool parsed = argc <= 2;
  if (argc == 2) {
    const char* end = argv[1] + std::strlen(argv[1]);
    const auto [ptr, ec] = std::from_chars(argv[1], end, rounds);
    parsed = ec == std::errc() && ptr == end;
  }
  if (!parsed || rounds < 1 || rounds > 100000) {
    std::fprintf(stderr, "usage: plan_locality_bench [ROUNDS in 1..100000]\n");
    return 2;
  }
  const Model models[] = {
      {"cnn_resnet3x16_b32", [] { return tools::make_resnet_cnn({}); }},
      {"gpt_demo_b16", [] { return tools::make_gpt({}); }},
      {"mlp_784_512_512_10_b128", [] { return tools::make_mlp({.widths = {784, 512, 512, 10}, .batch = 128}); }},
  };
  const Plan plans[] = {{"best", Algorithm::kBest},
                        {"online", Algorithm::kOnline},
                        {"caching", Algorithm::kCaching},
                        {"naive", Algorithm::kNaive}};
  std::printf("%-24s %-8s %10s %8s %10s %8s %8s\n", "model", "plan", "arena MiB", "vs lb", "replay ms", "vs best",
              "vs eager");
  for (const Model& m : models) {
    std::vector<std::unique_ptr<tools::Workload>> ws;
    std::vector<Graph> graphs;
    for (const Plan& p : plans) {
      ws.push_back(m.make());
      tools::Workload* w = ws.back().get();
      w->step();   // warm-up: optimizer state, convolution plans
      CaptureOptions options;
      options.planner = p.algorithm;
      absl::StatusOr<Graph> g = capture([w] { return w->step(); }, options);
      if (!g.ok()) {
        std::fprintf(stderr, "%s / %s: %s\n", m.name, p.name, g.status().ToString().c_str());
        return 1;
      }
      graphs.push_back(std::move(*g));
    }
    std::unique_ptr<tools::Workload> eager = m.make();
    eager->step();
    std::vector<std::vector<double>> t(graphs.size());
    std::vector<double> te;
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < graphs.size(); ++k) {
        t[k].push_back(time_ms([&] {
          if (absl::Status s = graphs[k].replay(); !s.ok()) std::abort();
        }));
      }
      te.push_back(time_ms([&] { eager->step(); }));
    }
    const double best = median(t[0]), eager_ms = median(te);
    for (size_t k = 0; k < graphs.size(); ++k) {
      const CaptureStats& s = graphs[k].stats();
      const double ms = median(t[k]);
      std::printf("%-24s %-8s %10.3f %8.3f %10.3f %8.3f %8.3f\n", m.name, plans[k].name, s.arena_bytes / 1048576.0,
                  static_cast<double>(s.arena_bytes) / static_cast<double>(s.lower_bound_bytes), ms, ms / best,
                  ms / eager_ms);
    }
    std::printf("%-24s %-8s %10s %8s %10.3f\n", m.name, "eager", "", "", eager_ms);
  }
  return 0;
}
