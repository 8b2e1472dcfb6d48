// Training steps eager and replayed, each beside a baseline measured in the
// same run:
//  - MLPs: the OpenBLAS GEMM floor of the step (the sgemm calls of forward and
//    backward alone: x W^T per layer, dW = g^T x per layer, dX = g W for all
//    layers but the first, whose input needs no gradient);
//  - every model: eager step time against replayed step time.
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/train_step_bench \
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Counters: "vs_floor" = step time / GEMM floor; "speedup" (replay rows) =
// eager step time / replay step time, eager timed in the same benchmark.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <functional>
#include <memory>

#include "encore/encore.h"

namespace encore {
namespace {

// A model with an AdamW step on fixed static inputs.
struct Workload {
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;
  std::function<Tensor()> loss;
  std::vector<Tensor> step() {
    opt->zero_grad();
    Tensor l = loss();
    l.backward();
    opt->step();
    return {l};
  }
};

std::unique_ptr<Workload> mlp(std::vector<int64_t> widths, int64_t batch) {
  auto w = std::make_unique<Workload>();
  manual_seed(1);
  auto m = std::make_unique<nn::Mlp>(widths);
  w->opt = std::make_unique<optim::AdamW>(m->parameters());
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

// A GPT of `layers` pre-norm blocks; with 1 layer, width 256 and 4 heads it is
// the transformer block of the issue (B 8, T 64, C 256, MLP 1024) plus small
// embeddings (vocab 64) and the loss.
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

// The sgemm calls of one MLP step, on scratch buffers.
double gemm_floor_ms(const std::vector<int64_t>& widths, int64_t batch, int reps) {
  std::vector<std::vector<float>> bufs;
  auto buf = [&](int64_t n) -> float* { bufs.emplace_back(n, 0.5f); return bufs.back().data(); };
  auto run = [&] {
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      const int64_t in = widths[l], out = widths[l + 1];
      float *x = buf(batch * in), *w = buf(out * in), *y = buf(batch * out);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1, x, in, w, in, 0, y, out);     // y = x W^T
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1, y, out, x, in, 0, w, in);     // dW = g^T x
      if (l > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1, y, out, w, in, 0, x, in);  // dX
      bufs.clear();
    }
  };
  run();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) run();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

double eager_ms(Workload& w, int reps) {
  w.step();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) w.step();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void BM_MlpEager(benchmark::State& state, std::vector<int64_t> widths, int64_t batch) {
  auto w = mlp(widths, batch);
  w->step();
  for (auto _ : state) w->step();
  state.counters["floor_ms"] = gemm_floor_ms(widths, batch, 5);
}

void BM_MlpReplay(benchmark::State& state, std::vector<int64_t> widths, int64_t batch) {
  auto w = mlp(widths, batch);
  absl::StatusOr<Graph> g = capture([&] { return w->step(); });
  if (!g.ok()) { state.SkipWithError(std::string(g.status().message()).c_str()); return; }
  for (auto _ : state) (void)g->replay();
  state.counters["floor_ms"] = gemm_floor_ms(widths, batch, 5);
  auto e = mlp(widths, batch);
  state.counters["eager_ms"] = eager_ms(*e, 5);
}

void BM_GptEager(benchmark::State& state, int64_t layers, int64_t width, int64_t heads, int64_t batch, int64_t seq,
                 int64_t vocab) {
  auto w = gpt(layers, width, heads, batch, seq, vocab);
  w->step();
  for (auto _ : state) w->step();
}

void BM_GptReplay(benchmark::State& state, int64_t layers, int64_t width, int64_t heads, int64_t batch, int64_t seq,
                  int64_t vocab) {
  auto w = gpt(layers, width, heads, batch, seq, vocab);
  absl::StatusOr<Graph> g = capture([&] { return w->step(); });
  if (!g.ok()) { state.SkipWithError(std::string(g.status().message()).c_str()); return; }
  for (auto _ : state) (void)g->replay();
  auto e = gpt(layers, width, heads, batch, seq, vocab);
  state.counters["eager_ms"] = eager_ms(*e, 3);
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

BENCHMARK_CAPTURE(BM_MlpEager, mlp_784_128_10_b32, std::vector<int64_t>{784, 128, 10}, 32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MlpReplay, mlp_784_128_10_b32, std::vector<int64_t>{784, 128, 10}, 32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MlpEager, mlp_784_512_512_10_b128, std::vector<int64_t>{784, 512, 512, 10}, 128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MlpReplay, mlp_784_512_512_10_b128, std::vector<int64_t>{784, 512, 512, 10}, 128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MlpEager, mlp_1024_4096_4096_1024_b64, std::vector<int64_t>{1024, 4096, 4096, 1024}, 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MlpReplay, mlp_1024_4096_4096_1024_b64, std::vector<int64_t>{1024, 4096, 4096, 1024}, 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GptEager, block_b8_t64_c256_h4, 1, 256, 4, 8, 64, 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GptReplay, block_b8_t64_c256_h4, 1, 256, 4, 8, 64, 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GptEager, demo_gpt_2x64_b16_t32, 2, 64, 4, 16, 32, 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GptReplay, demo_gpt_2x64_b16_t32, 2, 64, 4, 16, 32, 64)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
