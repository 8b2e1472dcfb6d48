// The CPU convolution choice of issue 21 (NOTE [ CPU convolution: oneDNN ] in
// src/backends/cpu/cnn.cpp): encore's convolution kernels (oneDNN, through
// the backend surface with its plan and workspace) against the alternative,
// im2col/col2im onto OpenBLAS's sgemm (written here, one image at a time, the
// column buffer allocated once outside the timed loop), on realistic shapes:
// batch 32, a CIFAR-size 3x32x32 network's layers (16/32/64 channels, 3x3)
// and a digits-size 8x8 network's. Forward, backward data and backward
// weights (with bias), f32, one thread: both run in the same process, each
// pair back to back, so each pair's ratio (im2col time / oneDNN time, read
// from the two rows: the program prints no ratio itself) is measured against
// a baseline of the same run.
//
//   OMP_WAIT_POLICY=passive build/bench/conv_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true
//   OPENBLAS_CORETYPE=SkylakeX build/bench/conv_bench ...   # OpenBLAS with its AVX-512 kernels
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "src/backends/kernels.h"

namespace encore {
namespace {

struct Shape2d {
  const char* name;
  int64_t n, c, h, w, k;   // 3x3, stride 1, padding 1
};

const Shape2d kShapes[] = {
    {"cifar_3to16_32x32", 32, 3, 32, 32, 16},  {"cifar_16to32_32x32", 32, 16, 32, 32, 32},
    {"cifar_32to64_16x16", 32, 32, 16, 16, 64}, {"cifar_64to64_8x8", 32, 64, 8, 8, 64},
    {"digits_1to16_8x8", 32, 1, 8, 8, 16},      {"digits_16to32_8x8", 32, 16, 8, 8, 32},
};

enum class Pass { kForward, kBackwardData, kBackwardWeights };

// ---- the alternative: im2col / col2im + OpenBLAS ----

void im2col(const float* x, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, float* col) {
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t s = 0; s < 3; ++s) {
        float* row = col + ((ch * 3 + r) * 3 + s) * oh * ow;
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t ih = i - 1 + r;
          float* out = row + i * ow;
          if (ih < 0 || ih >= h) {
            std::memset(out, 0, sizeof(float) * ow);
            continue;
          }
          const float* in = x + (ch * h + ih) * w;
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t iw = j - 1 + s;
            out[j] = iw >= 0 && iw < w ? in[iw] : 0.f;
          }
        }
      }
}

void col2im(const float* col, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, float* x) {
  std::memset(x, 0, sizeof(float) * c * h * w);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t s = 0; s < 3; ++s) {
        const float* row = col + ((ch * 3 + r) * 3 + s) * oh * ow;
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t ih = i - 1 + r;
          if (ih < 0 || ih >= h) continue;
          float* out = x + (ch * h + ih) * w;
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t iw = j - 1 + s;
            if (iw >= 0 && iw < w) out[iw] += row[i * ow + j];
          }
        }
      }
}

void im2col_gemm(benchmark::State& state, Shape2d s, Pass pass) {
  const int64_t p = s.h * s.w, kd = s.c * 9;
  std::vector<float> x(s.n * s.c * p, 0.5f), w(s.k * kd, 0.1f), y(s.n * s.k * p, 0.3f), b(s.k, 0.f);
  std::vector<float> col(kd * p);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f;
  const auto bi = [](int64_t v) { return static_cast<blasint>(v); };
  for (auto _ : state) {
    for (int64_t n = 0; n < s.n; ++n) {
      float* xn = x.data() + n * s.c * p;
      float* yn = y.data() + n * s.k * p;
      if (pass == Pass::kForward) {
        im2col(xn, s.c, s.h, s.w, s.h, s.w, col.data());
        for (int64_t k = 0; k < s.k; ++k) std::fill(yn + k * p, yn + (k + 1) * p, b[k]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(s.k), bi(p), bi(kd), 1.f, w.data(), bi(kd),
                    col.data(), bi(p), 1.f, yn, bi(p));
      } else if (pass == Pass::kBackwardData) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(kd), bi(p), bi(s.k), 1.f, w.data(), bi(kd), yn,
                    bi(p), 0.f, col.data(), bi(p));
        col2im(col.data(), s.c, s.h, s.w, s.h, s.w, xn);
      } else {
        im2col(xn, s.c, s.h, s.w, s.h, s.w, col.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(s.k), bi(kd), bi(p), 1.f, yn, bi(p), col.data(),
                    bi(p), n == 0 ? 0.f : 1.f, w.data(), bi(kd));
        for (int64_t k = 0; k < s.k; ++k) {
          float acc = n == 0 ? 0.f : b[k];
          for (int64_t i = 0; i < p; ++i) acc += yn[k * p + i];
          b[k] = acc;
        }
      }
    }
    benchmark::DoNotOptimize(x.data());
    benchmark::DoNotOptimize(w.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.n * s.k * p * kd, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// ---- encore's kernels (oneDNN), through the backend surface ----

void encore_conv(benchmark::State& state, Shape2d s, Pass pass) {
  manual_seed(1);
  Tensor x = randn({s.n, s.c, s.h, s.w}), w = randn({s.k, s.c, 3, 3}), b = randn({s.k});
  Tensor y = randn({s.n, s.k, s.h, s.w});
  const backend::Conv2dParams params{{1, 1}, {1, 1}, {1, 1}, 1};
  for (auto _ : state) {
    if (pass == Pass::kForward) backend::conv2d(y, x, w, b, params);
    else if (pass == Pass::kBackwardData) backend::conv2d_backward_data(x, y, w, params);
    else backend::conv2d_backward_weights(w, b, x, y, params);
  }
  const int64_t p = s.h * s.w, kd = s.c * 9;
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.n * s.k * p * kd, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void register_all() {
  const std::pair<Pass, const char*> passes[] = {
      {Pass::kForward, "forward"}, {Pass::kBackwardData, "backward_data"}, {Pass::kBackwardWeights, "backward_weights"}};
  for (const Shape2d& s : kShapes) {
    for (const auto& [pass, pname] : passes) {
      // Interleaved: each pair runs back to back, so load changes hit both.
      benchmark::RegisterBenchmark((std::string("onednn/") + pname + "/" + s.name).c_str(),
                                   [s, pass = pass](benchmark::State& st) { encore_conv(st, s, pass); })
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
      benchmark::RegisterBenchmark((std::string("im2col_openblas/") + pname + "/" + s.name).c_str(),
                                   [s, pass = pass](benchmark::State& st) { im2col_gemm(st, s, pass); })
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
    }
  }
}

}  // namespace
}  // namespace encore

int main(int argc, char** argv) {
  omp_set_num_threads(1);            // one thread: oneDNN and encore's loops run on OpenMP
  openblas_set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  encore::register_all();
  benchmark::AddCustomContext("threads", "1 (OpenMP and OpenBLAS)");
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
