// The losses and index ops of issue 21 on the CPU, each beside a baseline
// measured in the same run (ratios, not absolute times, are the figures):
//   nll_loss(log_softmax(x)) fwd+bwd   vs  cross_entropy(x) fwd+bwd (one fused kernel pair)
//   bce_with_logits fwd+bwd            vs  sigmoid fwd+bwd (one transcendental per element)
//   mse_loss fwd+bwd                   vs  add (a memory-bound pass)
//   index_select(w, 0, ids) fwd+bwd    vs  embedding(w, ids) fwd+bwd (the same gather and scatter)
//   gather(x, 1, idx[rows, 64]) fwd    vs  the same bytes copied (slice(...).contiguous())
//   topk(x, 5, 1)                      vs  max(x, 1)
//   multinomial(p [64, 1024], 1)       vs  softmax of p
// Sizes: [512, 1024] (B*T rows of a 1024-wide layer or vocabulary).
//
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 build/bench/loss_index_bench --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true      (one command line)
#include <benchmark/benchmark.h>

#include <vector>

#include "encore/encore.h"

namespace encore {
namespace {

constexpr int64_t kRows = 512, kCols = 1024;

Tensor labels(int64_t n, int64_t classes) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (i * 7919) % classes;
  return from_vector<int64_t>(v, {n});
}

void nll_of_log_softmax(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}).requires_grad_();
  const Tensor y = labels(kRows, kCols);
  for (auto _ : state) {
    nll_loss(log_softmax(x, 1), y).backward();
    x.set_grad(Tensor());
  }
}
BENCHMARK(nll_of_log_softmax)->Unit(benchmark::kMillisecond)->UseRealTime();

void cross_entropy_baseline(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}).requires_grad_();
  const Tensor y = labels(kRows, kCols);
  for (auto _ : state) {
    cross_entropy(x, y).backward();
    x.set_grad(Tensor());
  }
}
BENCHMARK(cross_entropy_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

void bce_with_logits(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}).requires_grad_();
  const Tensor t = rand({kRows, kCols});
  for (auto _ : state) {
    binary_cross_entropy_with_logits(x, t).backward();
    x.set_grad(Tensor());
  }
}
BENCHMARK(bce_with_logits)->Unit(benchmark::kMillisecond)->UseRealTime();

void sigmoid_baseline(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}).requires_grad_();
  const Tensor g = randn({kRows, kCols});
  for (auto _ : state) {
    sigmoid(x).backward(g);
    x.set_grad(Tensor());
  }
}
BENCHMARK(sigmoid_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

void mse(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}).requires_grad_();
  const Tensor t = randn({kRows, kCols});
  for (auto _ : state) {
    mse_loss(x, t).backward();
    x.set_grad(Tensor());
  }
}
BENCHMARK(mse)->Unit(benchmark::kMillisecond)->UseRealTime();

void add_baseline(benchmark::State& state) {
  manual_seed(1);
  const Tensor x = randn({kRows, kCols}), y = randn({kRows, kCols});
  for (auto _ : state) benchmark::DoNotOptimize((x + y).impl());
}
BENCHMARK(add_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

void index_select_rows(benchmark::State& state) {
  manual_seed(1);
  Tensor w = randn({kCols, kCols}).requires_grad_();
  const Tensor ids = labels(kRows, kCols);
  const Tensor g = randn({kRows, kCols});
  for (auto _ : state) {
    index_select(w, 0, ids).backward(g);
    w.set_grad(Tensor());
  }
}
BENCHMARK(index_select_rows)->Unit(benchmark::kMillisecond)->UseRealTime();

void embedding_baseline(benchmark::State& state) {
  manual_seed(1);
  Tensor w = randn({kCols, kCols}).requires_grad_();
  const Tensor ids = labels(kRows, kCols);
  const Tensor g = randn({kRows, kCols});
  for (auto _ : state) {
    embedding(w, ids).backward(g);
    w.set_grad(Tensor());
  }
}
BENCHMARK(embedding_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

void gather_columns(benchmark::State& state) {
  manual_seed(1);
  const Tensor x = randn({kRows, kCols});
  const Tensor idx = labels(kRows * 64, kCols).view({kRows, 64});
  for (auto _ : state) benchmark::DoNotOptimize(gather(x, 1, idx).impl());
}
BENCHMARK(gather_columns)->Unit(benchmark::kMillisecond)->UseRealTime();

void copy_baseline(benchmark::State& state) {
  manual_seed(1);
  const Tensor x = randn({kRows, kCols});
  for (auto _ : state) benchmark::DoNotOptimize(x.slice(1, 0, 64).contiguous().impl());
}
BENCHMARK(copy_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

void topk5(benchmark::State& state) {
  manual_seed(1);
  const Tensor x = randn({kRows, kCols});
  for (auto _ : state) benchmark::DoNotOptimize(topk(x, 5, 1).first.impl());
}
BENCHMARK(topk5)->Unit(benchmark::kMillisecond)->UseRealTime();

void max_baseline(benchmark::State& state) {
  manual_seed(1);
  const Tensor x = randn({kRows, kCols});
  for (auto _ : state) benchmark::DoNotOptimize(max(x, 1).first.impl());
}
BENCHMARK(max_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

void multinomial_rows(benchmark::State& state) {
  manual_seed(1);
  const Tensor p = softmax(randn({64, kCols}), 1);
  Generator gen(1);
  for (auto _ : state) benchmark::DoNotOptimize(multinomial(p, 1, false, &gen).impl());
}
BENCHMARK(multinomial_rows)->Unit(benchmark::kMicrosecond)->UseRealTime();

void softmax_baseline(benchmark::State& state) {
  manual_seed(1);
  const Tensor p = randn({64, kCols});
  for (auto _ : state) benchmark::DoNotOptimize(softmax(p, 1).impl());
}
BENCHMARK(softmax_baseline)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
