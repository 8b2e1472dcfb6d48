// Training steps eager and replayed, each beside baselines measured in the
// same run:
//  - the GEMM floor: the "gemm" launches of one eager step of the same model
//    (the same sgemm calls, shapes, transposes, betas and buffers), recorded
//    and then run alone; for the CNN rows the convolution floor instead: its
//    "conv2d*" launches (forward, data and weight gradients) and its GEMMs;
//  - the optimizer's own launches (update, lazy zero_grad), recorded and run
//    alone the same way: step / (floor + optimizer) is what the step costs
//    beyond the work no framework can skip;
//  - for replay rows, an eager step of a second instance of the model.
//
//   export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
//   build/bench/train_step_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// All figures are process CPU time (one thread: the same as wall time on an
// idle core, steadier on a loaded machine). Counters: "cpu_ms" = mean step
// CPU time of the benchmark loop; "step_ms", "floor_ms", "optimizer_ms" =
// median CPU times of the step, its GEMM floor and its optimizer launches,
// run in turn after the loop (paired_medians); "vs_floor" = step_ms /
// floor_ms; "vs_floor_and_optimizer" = step_ms / (floor_ms + optimizer_ms);
// "eager_ms" (replay rows) = median CPU time of an eager step; "speedup" =
// eager_ms / step_ms.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <vector>

#include "encore/encore.h"
#include "src/core/phase.h"
#include "src/core/step_observer.h"
#include "bench/cpu_time.h"
#include "tools/workloads.h"

namespace encore {
namespace {

using bench::cpu_now_ms;
using bench::median_cpu_ms;

// A model with an optimizer step (AdamW, or plain SGD for the rows named
// _sgd) on fixed static inputs.
using tools::Workload;

std::unique_ptr<Workload> mlp(std::vector<int64_t> widths, int64_t batch, bool sgd) {
  auto w = std::make_unique<Workload>();
  manual_seed(1);
  auto m = std::make_unique<nn::Mlp>(widths);
  if (sgd) {
    w->opt = std::make_unique<optim::SGD>(m->parameters(), optim::SgdOptions{.lr = 1e-3});
  } else {
    w->opt = std::make_unique<optim::AdamW>(m->parameters());
  }
  w->x = randn({batch, widths.front()});
  std::vector<int64_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % widths.back();
  w->y = from_vector<int64_t>(labels);
  nn::Mlp* raw = m.get();
  Workload* wp = w.get();
  w->loss = [raw, wp] { return cross_entropy(raw->forward(wp->x), wp->y); };
  w->model = std::move(m);
  return w;
}

// A GPT of `layers` pre-norm blocks (GELU-tanh, causal attention, tied
// embeddings of vocab 64, cross-entropy), AdamW at its defaults.
std::unique_ptr<Workload> gpt(int64_t layers, int64_t width, int64_t heads, int64_t batch, int64_t seq, int64_t vocab) {
  auto w = std::make_unique<Workload>();
  manual_seed(1);
  auto m = std::make_unique<nn::Gpt>(nn::GptConfig{.vocab_size = vocab, .block_size = seq, .n_layer = layers,
                                                   .n_head = heads, .n_embd = width});
  w->opt = std::make_unique<optim::AdamW>(m->parameters());
  std::vector<int64_t> ids(batch * seq);
  for (int64_t i = 0; i < batch * seq; ++i) ids[i] = (i * 7 + i / seq) % vocab;
  w->x = from_vector<int64_t>(ids, Shape{batch, seq});
  w->y = w->x;
  nn::Gpt* raw = m.get();
  Workload* wp = w.get();
  w->loss = [raw, wp] { return raw->loss(wp->x, wp->y); };
  w->model = std::move(m);
  return w;
}

// Records some launches of one eager step: the "gemm" launches (the GEMM
// floor; with convolutions, the "conv2d*" launches too), or the optimizer's (launched in Phase::kOptimizer: the update and
// the lazy zero_grad) — kernel, argument bytes, and a reference on every
// storage they touch, so the buffers outlive the step.
class LaunchRecorder : public StepObserver {
 public:
  enum class Kind { kGemm, kOptimizer };
  explicit LaunchRecorder(Kind kind) : kind_(kind) {}

  struct Launch {
    KernelThunk thunk;
    std::vector<std::max_align_t> args;   // aligned copy of the argument bytes
  };

  bool on_launch(const LaunchRecord& r) override {
    const bool wanted = kind_ == Kind::kGemm
                            ? std::strcmp(r.op, "gemm") == 0 || std::strncmp(r.op, "conv2d", 6) == 0
                            : current_phase() == Phase::kOptimizer;
    if (wanted) {
      Launch l{r.thunk, std::vector<std::max_align_t>((r.args_size + sizeof(std::max_align_t) - 1) /
                                                      sizeof(std::max_align_t))};
      std::memcpy(l.args.data(), r.args, r.args_size);
      launches_.push_back(std::move(l));
      for (auto set : {r.reads, r.writes}) {
        for (Storage* st : set) keep_.emplace_back(st);
      }
    }
    return true;   // run everything: this is an ordinary eager step
  }
  void on_host_access(const char*) override {}

  void run() const {
    for (const Launch& l : launches_) l.thunk(l.args.data());
  }
  size_t size() const { return launches_.size(); }

 private:
  Kind kind_;
  std::vector<Launch> launches_;
  std::vector<Ref<Storage>> keep_;
};

// Records the chosen launches of one steady eager step of w. Running the
// optimizer's alone keeps updating w's parameters: use a model of its own.
std::unique_ptr<LaunchRecorder> record_launches(Workload& w, LaunchRecorder::Kind kind) {
  w.step();   // lazy state exists: the recorded step is a steady one
  auto rec = std::make_unique<LaunchRecorder>(kind);
  {
    StepObserverScope observe(rec.get());
    w.step();
  }
  return rec;
}

// The baselines of one model, recorded from its own instance.
struct Baselines {
  std::unique_ptr<Workload> model;
  std::unique_ptr<LaunchRecorder> gemms, optimizer;
};
Baselines baselines(const std::function<std::unique_ptr<Workload>()>& make) {
  Baselines b{make(), nullptr, nullptr};
  b.gemms = record_launches(*b.model, LaunchRecorder::Kind::kGemm);
  b.optimizer = record_launches(*b.model, LaunchRecorder::Kind::kOptimizer);
  return b;
}

// Median CPU times of `step`, of the GEMM floor and of the optimizer's
// launches alone, measured in turn (floor, optimizer, step, floor, ... for at
// least 7 rounds and about 0.6 s, at most 300 rounds), so that all three see
// the same machine: a busy neighbour or a frequency change slows all of
// them, not one, and the ratios stay put.
struct Paired {
  double step_ms = 0, floor_ms = 0, optimizer_ms = 0;
};
template <typename F>
Paired paired_medians(F&& step, const Baselines& b) {
  step();
  b.gemms->run();
  b.optimizer->run();
  std::vector<double> ts, tf, to;
  auto time = [](auto&& fn, std::vector<double>& out) {
    const double t0 = cpu_now_ms();
    fn();
    out.push_back(cpu_now_ms() - t0);
  };
  const double start = cpu_now_ms();
  while (ts.size() < 7 || (cpu_now_ms() - start < 600.0 && ts.size() < 300)) {
    time([&] { b.gemms->run(); }, tf);
    time([&] { b.optimizer->run(); }, to);
    time(step, ts);
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  return {median(ts), median(tf), median(to)};
}

double eager_ms(Workload& w) {
  return median_cpu_ms([&] { w.step(); });
}

// Runs the benchmark loop (cpu_ms: its mean step time), then the paired
// measurement: step_ms, floor_ms, optimizer_ms; vs_floor = step_ms /
// floor_ms; vs_floor_and_optimizer = step_ms / (floor_ms + optimizer_ms),
// what the step costs beyond its GEMMs and its optimizer's own kernels.
template <typename F>
void timed_loop(benchmark::State& state, F&& step, const Baselines& b) {
  const double t0 = cpu_now_ms();
  for (auto _ : state) step();
  state.counters["cpu_ms"] = (cpu_now_ms() - t0) / static_cast<double>(state.iterations());
  const Paired p = paired_medians(step, b);
  state.counters["step_ms"] = p.step_ms;
  state.counters["floor_ms"] = p.floor_ms;
  state.counters["optimizer_ms"] = p.optimizer_ms;
  state.counters["vs_floor"] = p.step_ms / p.floor_ms;
  state.counters["vs_floor_and_optimizer"] = p.step_ms / (p.floor_ms + p.optimizer_ms);
}

using MakeWorkload = std::function<std::unique_ptr<Workload>()>;

void BM_Eager(benchmark::State& state, MakeWorkload make) {
  auto w = make();
  const Baselines b = baselines(make);
  state.counters["gemms"] = static_cast<double>(b.gemms->size());
  timed_loop(state, [&] { w->step(); }, b);
}

void BM_Replay(benchmark::State& state, MakeWorkload make, planner::Algorithm algorithm = planner::Algorithm::kBest) {
  auto w = make();
  absl::StatusOr<Graph> g = capture([&] { return w->step(); }, {.planner = algorithm});
  if (!g.ok()) { state.SkipWithError(std::string(g.status().message()).c_str()); return; }
  const Baselines b = baselines(make);
  // A refused replay runs nothing and would time as a very fast step: keep
  // the first refusal and report it instead of the figures.
  absl::Status refused;
  timed_loop(state, [&] {
    if (absl::Status s = g->replay(); !s.ok() && refused.ok()) refused = s;
  }, b);
  if (!refused.ok()) {
    state.SkipWithError(("replay: " + refused.ToString()).c_str());
    return;
  }
  auto e = make();
  const double eager = eager_ms(*e);
  state.counters["eager_ms"] = eager;
  state.counters["speedup"] = eager / state.counters["step_ms"];
  state.counters["arena_MiB"] = g->stats().arena_bytes / 1048576.0;
  state.counters["arena_vs_lb"] = static_cast<double>(g->stats().arena_bytes) / g->stats().lower_bound_bytes;
  state.counters["arena_vs_eager_peak"] = static_cast<double>(g->stats().arena_bytes) / g->stats().eager_peak_bytes;
  // The same recorded lifetimes under the no-planning and caching-allocator baselines.
  for (auto [algo, name] : {std::pair{planner::Algorithm::kNaive, "naive_vs_arena"},
                            std::pair{planner::Algorithm::kCaching, "caching_vs_arena"}}) {
    absl::StatusOr<planner::Plan> p = planner::plan_buffers(g->buffers(), {.algorithm = algo});
    if (p.ok()) state.counters[name] = static_cast<double>(p->peak) / g->stats().arena_bytes;
  }
}

MakeWorkload mlp_of(std::vector<int64_t> widths, int64_t batch, bool sgd = false) {
  return [=] { return mlp(widths, batch, sgd); };
}
MakeWorkload cnn_of(int64_t blocks, int64_t channels, int64_t batch) {
  return [=] { return tools::make_resnet_cnn({.blocks = blocks, .channels = channels, .batch = batch}); };
}
MakeWorkload block_of() {
  return [] { return tools::make_block({}); };
}
MakeWorkload gpt_of(int64_t layers, int64_t width, int64_t heads, int64_t batch, int64_t seq, int64_t vocab) {
  return [=] { return gpt(layers, width, heads, batch, seq, vocab); };
}

#define TRAIN_STEP_BENCH(name, make)                                                     \
  BENCHMARK_CAPTURE(BM_Eager, name, make)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime(); \
  BENCHMARK_CAPTURE(BM_Replay, name, make)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()

TRAIN_STEP_BENCH(mlp_784_128_10_b32, mlp_of({784, 128, 10}, 32));
TRAIN_STEP_BENCH(mlp_784_512_512_10_b128, mlp_of({784, 512, 512, 10}, 128));
TRAIN_STEP_BENCH(mlp_1024_4096_4096_1024_b64, mlp_of({1024, 4096, 4096, 1024}, 64));
// The transformer block of bench/peers/torch_cpu_steps (exact GELU, AdamW
// lr 1e-3); before session 13 this row was a 1-layer GPT of the same shapes.
TRAIN_STEP_BENCH(block_b8_t64_c256_h4, block_of());
// The MLPs with plain SGD: the update streams 12 bytes per parameter instead
// of AdamW's 28, which is what separates the large MLP from its GEMM floor.
TRAIN_STEP_BENCH(mlp_784_128_10_b32_sgd, mlp_of({784, 128, 10}, 32, true));
TRAIN_STEP_BENCH(mlp_784_512_512_10_b128_sgd, mlp_of({784, 512, 512, 10}, 128, true));
TRAIN_STEP_BENCH(mlp_1024_4096_4096_1024_b64_sgd, mlp_of({1024, 4096, 4096, 1024}, 64, true));
TRAIN_STEP_BENCH(demo_gpt_2x64_b16_t32, gpt_of(2, 64, 4, 16, 32, 64));
// The convnets issue's CNN step (floor: its convolutions and GEMMs).
TRAIN_STEP_BENCH(cnn_resnet3x16_b32_3x32x32, cnn_of(3, 16, 32));
// The same graph with the arena laid out by the caching-allocator planner
// (LIFO reuse of freed blocks, like the eager allocator): isolates the effect
// of buffer placement on cache locality from everything else replay changes.
BENCHMARK_CAPTURE(BM_Replay, demo_gpt_2x64_b16_t32_caching_plan, gpt_of(2, 64, 4, 16, 32, 64),
                  planner::Algorithm::kCaching)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(BM_Replay, block_b8_t64_c256_h4_caching_plan, block_of(),
                  planner::Algorithm::kCaching)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
