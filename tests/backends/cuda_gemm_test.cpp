// The CUDA gemm family (cuBLAS matmul, column_sum) against the CPU backend:
// every matmul/linear shape class of tests/ops/matmul_test.cpp, transposed
// and broadcast operands, alpha/beta and sums into a smaller output batch,
// f32 near-exact and f16/bf16 to a rounding step, gradients, launch records
// (no copies for transposes, the cuBLAS workspace in the writes) and
// bit-identical reruns. Skips without a GPU; the cuBLAS status mapping and the
// no-GPU error path run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "src/backends/cuda/blas.h"
#include "src/backends/kernels.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"
#include "tests/backends/cuda_test_util.h"

namespace encore {
namespace {

using testing::expect_cuda_matches_cpu;
using testing::random_tensor;

// NOTE [ CUDA tolerances ]: f32 GEMMs to ~1e-5 (TF32 off; summation order
// differs); f16/bf16 to one rounding step of the output type.
constexpr double kF32Tol = 2e-5;
constexpr double kF16Tol = 2e-3;
constexpr double kBF16Tol = 1.6e-2;

double tol_for(DType t) { return t == kFloat32 ? kF32Tol : t == kFloat16 ? kF16Tol : kBF16Tol; }

const testing::Fn kMatmul = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
const testing::Fn kLinear = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
const testing::Fn kLinearNoBias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); };

// The backend's matmul (the CPU's or CUDA's, by the tensors' device) into a
// copy of in[2]: out = alpha a b + beta out.
testing::Fn backend_matmul(float alpha, float beta) {
  return [=](const std::vector<Tensor>& in) {
    Tensor out = in[2].detach().clone();
    backend::matmul(out, in[0].detach(), in[1].detach(), alpha, beta);
    return out;
  };
}

// The backend's column_sum of in[0].
Tensor backend_column_sum(const std::vector<Tensor>& in) {
  Tensor out = empty({in[0].size(1)}, in[0].dtype(), in[0].device());
  backend::column_sum(out, in[0]);
  return out;
}

void expect_matmul_matches(const Shape& sa, const Shape& sb, uint64_t seed, DType dt = kFloat32,
                           bool backward = false) {
  SCOPED_TRACE(shape_str(sa) + " x " + shape_str(sb) + " " + std::string(dtype_name(dt)));
  const double tol = tol_for(dt);
  expect_cuda_matches_cpu(kMatmul, {random_tensor(sa, seed, dt), random_tensor(sb, seed + 1, dt)}, tol, tol,
                          backward);
}

// Records the launches on cuda:0's stream (and runs them).
class CudaLaunchLog : public StepObserver {
 public:
  bool on_launch(const LaunchRecord& launch) override {
    if (!launch.device.is_cuda()) return true;   // the scope watches the CPU's stream too
    ops.emplace_back(launch.op);
    reads.assign(launch.reads.begin(), launch.reads.end());
    writes.assign(launch.writes.begin(), launch.writes.end());
    return true;
  }
  void on_host_access(const char*) override {}

  std::vector<std::string> ops;
  std::vector<Storage*> reads, writes;   // of the last launch

 private:
  StepObserverScope observe_{this};
};

bool contains(const std::vector<Storage*>& v, Storage* s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// ---- runs without a GPU ----

TEST(CudaGemmTest, CublasStatusesMapToCodesAndNameTheCall) {
  const absl::Status s = cuda::cublas_status(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("cublasCreate"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("CUBLAS_STATUS_NOT_INITIALIZED"), absl::string_view::npos) << s;
  EXPECT_EQ(cuda::cublas_status(CUBLAS_STATUS_ALLOC_FAILED, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cuda::cublas_status(CUBLAS_STATUS_INVALID_VALUE, "x").code(), absl::StatusCode::kInternal);
  EXPECT_NO_THROW(cuda::check_cublas(CUBLAS_STATUS_SUCCESS, "x"));
  try {
    ENCORE_CUBLAS_CHECK(CUBLAS_STATUS_EXECUTION_FAILED, "gemm: cublasGemmStridedBatchedEx");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("cublasGemmStridedBatchedEx"), std::string::npos) << e.what();
  }
  const auto returns = [] () -> absl::Status {
    ENCORE_RETURN_IF_CUBLAS_ERROR(CUBLAS_STATUS_NOT_SUPPORTED, "cublasSetMathMode");
    return absl::OkStatus();
  };
  EXPECT_NE(returns().message().find("cublasSetMathMode"), absl::string_view::npos);
}

TEST(CudaGemmTest, WithoutGpuTheHandleIsAnErrorNotACrash) {
  if (cuda_available()) GTEST_SKIP() << "a GPU answers: the no-GPU path cannot be reached";
  const absl::Status s = status_of([] { (void)cuda::lease_blas(0); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

// ---- forward ----

TEST(CudaGemmTest, TwoDMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},     {{1, 1}, {1, 1}},       {{7, 1}, {1, 6}},       {{1, 8}, {8, 1}},
      {{65, 70}, {70, 33}}, {{130, 90}, {90, 120}}, {{257, 255}, {255, 256}},
  };
  uint64_t seed = 1;
  for (const auto& [sa, sb] : cases) expect_matmul_matches(sa, sb, seed += 2);
}

TEST(CudaGemmTest, BatchedAndBroadcastBatchMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4, 5}, {3, 5, 2}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{4, 3}, {2, 3, 5}},   {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {1, 4, 5}}, {{1, 3, 4}, {6, 4, 2}},    {{2, 2, 1, 3, 4}, {3, 4, 2}},
      {{512, 8, 8}, {512, 8, 8}}, {{2, 3, 7, 16}, {2, 3, 16, 9}},   // the last merges into one batch of 6
  };
  uint64_t seed = 10;
  for (const auto& [sa, sb] : cases) expect_matmul_matches(sa, sb, seed += 2);
}

TEST(CudaGemmTest, OneDimOperandsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {4}}, {{4}, {4, 3}}, {{3, 4}, {4}}, {{2, 3, 4}, {4}}, {{4}, {2, 4, 3}}, {{1}, {1}}, {{255}, {255, 257}},
  };
  uint64_t seed = 20;
  for (const auto& [sa, sb] : cases) expect_matmul_matches(sa, sb, seed += 2);
}

TEST(CudaGemmTest, TransposedAndStridedOperandsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor a = random_tensor({3, 4}, 30), b = random_tensor({4, 5}, 31);
  const std::vector<std::pair<testing::Fn, std::vector<Tensor>>> cases = {
      {[](const auto& in) { return matmul(in[0].t(), in[1].t()); },   // both column-major
       {random_tensor({4, 3}, 32), random_tensor({5, 4}, 33)}},
      {[](const auto& in) { return matmul(in[0].transpose(0, 1), in[1]); },   // batch dims that do not fold
       {random_tensor({3, 2, 4}, 34), b}},
      {[](const auto& in) { return matmul(in[0].transpose(1, 2), in[1].transpose(1, 2)); },
       {random_tensor({2, 4, 3}, 35), random_tensor({2, 5, 4}, 36)}},
      {[](const auto& in) { return matmul(in[0].slice(1, 0, 8, 2), in[1]); },   // no unit stride: copied
       {random_tensor({3, 8}, 37), b}},
      {[](const auto& in) { return matmul(in[0].slice(0, 0, 6, 2), in[1]); },   // row stride 8
       {random_tensor({6, 4}, 38), b}},
      {[](const auto& in) { return matmul(in[0].expand({3, 4}), in[1]); },   // row stride 0
       {random_tensor({1, 4}, 39), b}},
      {[](const auto& in) { return matmul(in[0].unsqueeze(0).expand({5, 3, 4}), in[1]); },   // batch stride 0
       {a, random_tensor({5, 4, 2}, 40)}},
      {[](const auto& in) { return matmul(in[0].slice(2, 1, 5), in[1]); },   // folds with row stride 6
       {random_tensor({2, 3, 6}, 43), random_tensor({4, 2}, 44)}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i);
    expect_cuda_matches_cpu(cases[i].first, cases[i].second, kF32Tol, kF32Tol, /*backward=*/true);
  }
  expect_cuda_matches_cpu(kMatmul, {testing::non_contiguous(a), testing::non_contiguous(b)}, kF32Tol, kF32Tol);
}

TEST(CudaGemmTest, TransposedOperandsReachCublasWithoutACopyAndTheWorkspaceIsWritten) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor a = random_tensor({4, 3}, 50).to(gpu).t(), b = random_tensor({5, 4}, 51).to(gpu).t();
  CudaLaunchLog log;
  const Tensor out = matmul(a, b);
  EXPECT_EQ(log.ops, std::vector<std::string>{"gemm"});
  EXPECT_TRUE(contains(log.reads, a.storage()));
  EXPECT_TRUE(contains(log.reads, b.storage()));
  ASSERT_EQ(log.writes.size(), 2u);   // out and the cuBLAS workspace (NOTE [ cuBLAS workspace ])
  EXPECT_EQ(log.writes[0], out.storage());
  EXPECT_GE(log.writes[1]->nbytes(), cuda::blas_workspace_bytes(0));
  EXPECT_TRUE(log.writes[1]->device().is_cuda());
}

TEST(CudaGemmTest, EmptyDimsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 0}, {0, 4}}, {{0, 4}, {4, 3}}, {{3, 4}, {4, 0}}, {{0, 2, 3}, {3, 4}},
      {{1, 2, 3}, {0, 3, 4}}, {{2, 3, 0}, {2, 0, 5}}, {{0}, {0}},
  };
  uint64_t seed = 60;
  for (const auto& [sa, sb] : cases) expect_matmul_matches(sa, sb, seed += 2);
  // The gradient of a is a sum over an empty broadcast batch: zeros.
  expect_matmul_matches({1, 2, 3}, {0, 3, 4}, 80, kFloat32, /*backward=*/true);
  // k == 0 with beta: out = beta * out; beta == 0 clears even NaNs.
  const Tensor out = random_tensor({3, 4}, 70);
  expect_cuda_matches_cpu(backend_matmul(1.f, 0.5f), {random_tensor({3, 0}, 71), random_tensor({0, 4}, 72), out},
                          0, 0);
  const Tensor nans = full({3, 4}, std::nan(""));
  expect_cuda_matches_cpu(backend_matmul(1.f, 0.f), {random_tensor({3, 0}, 73), random_tensor({0, 4}, 74), nans},
                          0, 0);
}

TEST(CudaGemmTest, HalfAndBFloat16MatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : {kFloat16, kBFloat16}) {
    const double tol = tol_for(dt);
    expect_matmul_matches({5, 16}, {16, 7}, 80, dt, /*backward=*/true);
    expect_matmul_matches({2, 1, 3, 8}, {4, 8, 2}, 82, dt, /*backward=*/true);
    expect_matmul_matches({8}, {8, 3}, 84, dt);
    expect_matmul_matches({64, 96}, {96, 80}, 86, dt);
    expect_cuda_matches_cpu([](const auto& in) { return matmul(in[0], in[1].transpose(1, 2)); },
                            {random_tensor({2, 3, 16}, 88, dt), random_tensor({2, 7, 16}, 89, dt)}, tol, tol, true);
    expect_cuda_matches_cpu(kLinear,
                            {random_tensor({2, 3, 16}, 90, dt), random_tensor({5, 16}, 91, dt),
                             random_tensor({5}, 92, dt)},
                            tol, tol, /*backward=*/true);
  }
}

TEST(CudaGemmTest, LinearMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  struct Case { Shape x, w; bool bias; };
  const std::vector<Case> cases = {
      {{5, 4}, {3, 4}, false}, {{5, 4}, {3, 4}, true}, {{2, 3, 4}, {5, 4}, true}, {{4}, {3, 4}, true},
      {{64, 96}, {80, 96}, true}, {{0, 4}, {3, 4}, true}, {{2, 0}, {3, 0}, true}, {{2, 4}, {0, 4}, true},
      {{257, 255}, {256, 255}, true},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " " + shape_str(c.w) + (c.bias ? " with bias" : ""));
    const Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++);
    if (c.bias) {
      expect_cuda_matches_cpu(kLinear, {x, w, random_tensor({c.w[0]}, seed++)}, kF32Tol, kF32Tol, true);
    } else {
      expect_cuda_matches_cpu(kLinearNoBias, {x, w}, kF32Tol, kF32Tol, true);
    }
  }
  // Leading dims that do not fold, a column-major weight, a strided bias.
  expect_cuda_matches_cpu(
      [](const auto& in) { return linear(in[0].transpose(0, 1), in[1].t(), in[2].slice(0, 0, 10, 2)); },
      {random_tensor({3, 2, 4}, 120), random_tensor({4, 5}, 121), random_tensor({10}, 122)}, kF32Tol, kF32Tol, true);
}

// ---- accumulation: alpha, beta, sums into a smaller output batch ----

TEST(CudaGemmTest, AlphaBetaAndSumsIntoSmallerOutputBatchMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const double tol = tol_for(dt);
    for (float beta : {0.f, 0.5f, 1.f}) {
      SCOPED_TRACE(::testing::Message() << "beta " << beta);
      // out [1, 3, 2] (+)= 2 * sum over the batch of 4 products.
      expect_cuda_matches_cpu(backend_matmul(2.f, beta),
                              {random_tensor({4, 3, 5}, 1, dt), random_tensor({4, 5, 2}, 2, dt),
                               random_tensor({1, 3, 2}, 3, dt)},
                              tol, tol);
      // Reduced dim between two parallel ones: out [2, 1, 3, 6, 5] from batch [2, 4, 3].
      expect_cuda_matches_cpu(backend_matmul(1.f, beta),
                              {random_tensor({2, 4, 1, 6, 7}, 4, dt), random_tensor({4, 3, 7, 5}, 5, dt),
                               random_tensor({2, 1, 3, 6, 5}, 6, dt)},
                              tol, tol);
      // Missing leading out dim, plain 2-D out with padded rows (ldc 9).
      expect_cuda_matches_cpu(
          [=](const std::vector<Tensor>& in) {
            Tensor out = in[2].detach().clone();
            const Tensor view = out.slice(1, 0, 5);
            backend::matmul(view, in[0], in[1], 1.5f, beta);
            return out;
          },
          {random_tensor({3, 6, 7}, 7, dt), random_tensor({3, 7, 5}, 8, dt), random_tensor({6, 9}, 9, dt)}, tol, tol);
    }
  }
}

TEST(CudaGemmTest, ReplaysOfAReducingProductAreBitIdentical) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor a = random_tensor({8, 64, 32}, 1).to(gpu), b = random_tensor({8, 32, 48}, 2).to(gpu);
  const Tensor first = zeros({1, 64, 48}, kFloat32, gpu), second = zeros({1, 64, 48}, kFloat32, gpu);
  backend::matmul(first, a, b);
  backend::matmul(second, a, b);
  const std::vector<double> x = testing::values(first.to(kCPU)), y = testing::values(second.to(kCPU));
  EXPECT_EQ(x, y);
}

// ---- backward ----

TEST(CudaGemmTest, MatmulGradientsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{4}, {4, 3}},    {{3, 4}, {4}},         {{4}, {4}},
      {{4}, {2, 4, 3}}, {{2, 3, 4}, {4, 5}},       {{2, 3, 4}, {4}}, {{3, 4}, {2, 4, 5}},   {{1, 3, 4}, {6, 4, 2}},
      {{65, 70}, {70, 33}},
  };
  uint64_t seed = 200;
  for (const auto& [sa, sb] : cases) expect_matmul_matches(sa, sb, seed += 2, kFloat32, /*backward=*/true);
  expect_cuda_matches_cpu([](const auto& in) { return matmul(in[0].t(), in[1].transpose(1, 2)); },
                          {random_tensor({4, 3}, 230), random_tensor({2, 5, 4}, 231)}, kF32Tol, kF32Tol, true);
}

TEST(CudaGemmTest, LinearGradientsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu(kLinear, {random_tensor({2, 3, 4}, 1), random_tensor({5, 4}, 2), random_tensor({5}, 3)},
                          kF32Tol, kF32Tol, true);
  expect_cuda_matches_cpu(kLinear, {random_tensor({4}, 4), random_tensor({3, 4}, 5), random_tensor({3}, 6)}, kF32Tol,
                          kF32Tol, true);
  // 1000 rows: the bias gradient's column sum runs in two row chunks.
  expect_cuda_matches_cpu(kLinear, {random_tensor({1000, 33}, 7), random_tensor({17, 33}, 8), random_tensor({17}, 9)},
                          1e-4, kF32Tol, true);
}

// ---- column_sum ----

TEST(CudaGemmTest, ColumnSumMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  // Rows and columns across the 32-column tile, the 8 row lanes and the
  // 512-row chunks (100000 rows: the 64-chunk cap).
  const std::vector<Shape> shapes = {{1, 1}, {7, 3}, {255, 257}, {256, 1}, {257, 33}, {3000, 40}, {100000, 3}, {0, 5}};
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(shape_str(s) + " " + std::string(dtype_name(dt)));
      // The CPU sums rows in sequence in f32: its own error grows with rows.
      const double atol = 1e-5 + 3e-7 * static_cast<double>(s[0]);
      const double rtol = dt == kFloat32 ? 1e-5 : tol_for(dt);
      expect_cuda_matches_cpu(backend_column_sum, {random_tensor(s, 300, dt)}, atol, rtol);
    }
  }
  // Rows with a stride (a column slice), and columns with no unit stride (copied).
  expect_cuda_matches_cpu([](const auto& in) { return backend_column_sum({in[0].slice(1, 5, 305)}); },
                          {random_tensor({600, 310}, 301)}, 1e-4, 1e-5);
  expect_cuda_matches_cpu([](const auto& in) { return backend_column_sum({in[0].t()}); },
                          {random_tensor({40, 700}, 302)}, 1e-4, 1e-5);
}

TEST(CudaGemmTest, ColumnSumIsBitIdenticalAcrossRuns) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor x = random_tensor({20000, 70}, 1).to(Device::cuda(0));
  const std::vector<double> first = testing::values(backend_column_sum({x}).to(kCPU));
  const std::vector<double> second = testing::values(backend_column_sum({x}).to(kCPU));
  EXPECT_EQ(first, second);
}

}  // namespace
}  // namespace encore
