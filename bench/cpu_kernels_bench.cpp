// The CPU elementwise, reduction (sum, mean, var, max, softmax, layer norm)
// and optimizer (AdamW, SGD) kernels of issue 19, alone, at the sizes of the
// transformer block and the CNN step (B 8, T 64, C 256: the MLP's hidden activations are
// [512, 1024]; SGD over the large MLP's 25.2 M parameters); wall time, so
// that a second thread shows.
//
//   export OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1
//   OMP_NUM_THREADS=1 build/bench/cpu_kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   OMP_NUM_THREADS=2 build/bench/cpu_kernels_bench ...
#include <benchmark/benchmark.h>

#include <functional>
#include <vector>

#include "encore/encore.h"

namespace encore {
namespace {

constexpr int64_t kRows = 512, kCols = 1024;   // B*T, 4C

void forward(benchmark::State& state, std::function<Tensor(const Tensor&)> fn) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols});
  for (auto _ : state) {
    Tensor y = fn(x);
    benchmark::DoNotOptimize(y.impl());
  }
}

// The backward kernel alone is the difference of these two rows.
void forward_backward(benchmark::State& state, std::function<Tensor(const Tensor&)> fn) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}).requires_grad_();
  Tensor g = randn({kRows, kCols});
  for (auto _ : state) {
    fn(x).backward(g);
    x.set_grad(Tensor());
  }
}

Tensor gelu_erf(const Tensor& x) { return gelu(x, GeluApprox::kNone); }
Tensor square(const Tensor& x) { return pow(x, 2.0); }
Tensor cube(const Tensor& x) { return pow(x, 3.0); }
Tensor pow_general(const Tensor& x) { return pow(x, 1.7); }
Tensor exp_of(const Tensor& x) { return exp(x); }
Tensor tanh_of(const Tensor& x) { return tanh(x); }

void add(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols}), y = randn({kRows, kCols});
  for (auto _ : state) {
    Tensor z = x + y;
    benchmark::DoNotOptimize(z.impl());
  }
}
BENCHMARK(add)->Unit(benchmark::kMillisecond)->UseRealTime();

void mul_scalar(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols});
  for (auto _ : state) {
    Tensor z = x * 0.5;
    benchmark::DoNotOptimize(z.impl());
  }
}
BENCHMARK(mul_scalar)->Unit(benchmark::kMillisecond)->UseRealTime();

// The CNN step's own kernels (bench/train_step_bench, cnn_resnet3x16): batch
// norm in training mode and relu on one [32, 16, 32, 32] activation.
void cnn_forward(benchmark::State& state, std::function<Tensor(const Tensor&)> fn) {
  manual_seed(1);
  Tensor x = randn({32, 16, 32, 32});
  for (auto _ : state) {
    Tensor y = fn(x);
    benchmark::DoNotOptimize(y.impl());
  }
}
void cnn_forward_backward(benchmark::State& state, std::function<Tensor(const Tensor&)> fn) {
  manual_seed(1);
  Tensor x = randn({32, 16, 32, 32}).requires_grad_();
  Tensor g = randn({32, 16, 32, 32});
  for (auto _ : state) {
    fn(x).backward(g);
    x.set_grad(Tensor());
  }
}
Tensor batch_norm_train(const Tensor& x) {
  static Tensor rm = zeros({16}), rv = ones({16});
  static Tensor w = ones({16}).requires_grad_(), b = zeros({16}).requires_grad_();
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  return batch_norm(x, rm, rv, w, b, true);
}
Tensor relu_of(const Tensor& x) { return relu(x); }
BENCHMARK_CAPTURE(cnn_forward, batch_norm, batch_norm_train)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(cnn_forward_backward, batch_norm, batch_norm_train)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(cnn_forward, relu, relu_of)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(cnn_forward_backward, relu, relu_of)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_CAPTURE(forward, gelu_erf, gelu_erf)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward_backward, gelu_erf, gelu_erf)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward, pow2, square)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward_backward, pow2, square)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward_backward, pow3, cube)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward, pow1_7, pow_general)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward, exp, exp_of)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward, tanh, tanh_of)->Unit(benchmark::kMillisecond)->UseRealTime();

// AdamW over the parameters of the transformer block (qkv, proj, fc, fc2
// weights and biases, two LayerNorms): 789,760 f32 values in 12 tensors.
void adamw_step(benchmark::State& state) {
  manual_seed(1);
  std::vector<Tensor> params;
  for (Shape s : {Shape{768, 256}, Shape{768}, Shape{256, 256}, Shape{256}, Shape{1024, 256}, Shape{1024},
                  Shape{256, 1024}, Shape{256}, Shape{256}, Shape{256}, Shape{256}, Shape{256}}) {
    params.push_back(randn(s).requires_grad_());
  }
  optim::AdamW opt(params);
  for (Tensor& p : params) p.sum().backward();
  for (auto _ : state) opt.step();
}
BENCHMARK(adamw_step)->Unit(benchmark::kMillisecond)->UseRealTime();


// Reductions on [512, 1024]: along the rows (dim -1), down the columns (dim 0), everything.
void reduce(benchmark::State& state, std::function<Tensor(const Tensor&)> fn) {
  manual_seed(1);
  Tensor x = randn({kRows, kCols});
  for (auto _ : state) {
    Tensor y = fn(x);
    benchmark::DoNotOptimize(y.impl());
  }
}
Tensor sum_rows(const Tensor& x) { return sum(x, {-1}); }
Tensor sum_cols(const Tensor& x) { return sum(x, {0}); }
Tensor sum_all(const Tensor& x) { return sum(x); }
Tensor mean_rows(const Tensor& x) { return mean(x, {-1}); }
Tensor var_rows(const Tensor& x) { return var(x, {-1}); }
Tensor var_cols(const Tensor& x) { return var(x, {0}); }
Tensor max_rows(const Tensor& x) { return max(x, -1).first; }
Tensor max_cols(const Tensor& x) { return max(x, 0).first; }
Tensor softmax_rows(const Tensor& x) { return softmax(x, -1); }
Tensor layer_norm_rows(const Tensor& x) { return layer_norm(x, {kCols}); }
BENCHMARK_CAPTURE(reduce, sum_rows, sum_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, sum_cols, sum_cols)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, sum_all, sum_all)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, mean_rows, mean_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, var_rows, var_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, var_cols, var_cols)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, max_rows, max_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, max_cols, max_cols)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, softmax_rows, softmax_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(reduce, layer_norm_rows, layer_norm_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward_backward, softmax_rows, softmax_rows)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward_backward, layer_norm_rows, layer_norm_rows)->Unit(benchmark::kMillisecond)->UseRealTime();

// The demo GPT's attention softmax: [16, 4, 32, 32], rows of 32.
void short_rows(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({16, 4, 32, 32});
  for (auto _ : state) {
    Tensor y = softmax(x, -1);
    benchmark::DoNotOptimize(y.impl());
  }
}
BENCHMARK(short_rows)->Unit(benchmark::kMillisecond)->UseRealTime();

// SGD, momentum 0.9, over the parameters of the 1024-4096-4096-1024 MLP
// (three weights and biases, 25.2 M f32 values); arg 1: weight decay 1e-4.
void sgd_step(benchmark::State& state) {
  manual_seed(1);
  std::vector<Tensor> params;
  for (Shape s : {Shape{4096, 1024}, Shape{4096}, Shape{4096, 4096}, Shape{4096}, Shape{1024, 4096}, Shape{1024}}) {
    params.push_back(randn(s).requires_grad_());
  }
  optim::SGD opt(params, {.lr = 0.01, .momentum = 0.9, .weight_decay = state.range(0) != 0 ? 1e-4 : 0.0});
  for (Tensor& p : params) p.sum().backward();
  for (auto _ : state) opt.step();
}
BENCHMARK(sgd_step)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
