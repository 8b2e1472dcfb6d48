// CUDA reductions (src/backends/cuda/reduce.cu) against the CPU backend:
// sum, mean, var, max/argmax and max's backward, for every supported dtype,
// contiguous, strided, permuted and broadcast inputs, sizes around the block
// edges (1, 7, 255, 256, 257) and long reductions (100k, 1M elements: the
// two-pass plan), plus determinism. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "src/backends/kernels.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_cuda_matches_cpu;
using testing::random_tensor;

// NOTE [ CUDA tolerances ] (cuda_test_util.h): 1e-5 relative in f32, one
// rounding step of f16/bf16; plus an absolute term for sums that cancel to
// near 0, scaled by sqrt(count) (the size of a sum of count N(0,1) values).
struct Tol {
  double atol, rtol;
};
Tol tol_for(DType dtype, int64_t count) {
  const double atol = 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(count, 1)));
  if (dtype == kFloat16) return {atol, 2e-3};
  if (dtype == kBFloat16) return {atol, 1e-2};
  if (dtype == kFloat32) return {atol, 1e-5};
  return {0, 0};   // integers: exact
}

int64_t count_of(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t c = 1;
  if (dims.empty()) return numel_of(shape);
  for (int64_t d : dims) c *= shape[d < 0 ? d + static_cast<int64_t>(shape.size()) : d];
  return c;
}

// Input of `shape` and `dtype`: N(0,1) for floats, N(0,1000) rounded for
// integers, about half true for bool.
Tensor input(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor r = random_tensor(shape, seed);
  if (dtype == kInt32 || dtype == kInt64) return mul(r, 1000.0).to(dtype);
  if (dtype == kBool) return relu(r).to(kBool);
  return r.to(dtype);
}

// How the test hands the input to the op: as it is, or as a strided view.
enum class View { kContiguous, kTransposed, kStepped, kBroadcast };

struct Case {
  Shape shape;
  std::vector<int64_t> dims;   // empty: all
  bool keepdim = false;
};

std::string name(const Case& c, DType dtype, View view) {
  return absl::StrFormat("shape %s dims %s keepdim %d dtype %s view %d", shape_str(c.shape), shape_str(c.dims),
                         c.keepdim, dtype_name(dtype), static_cast<int>(view));
}

// Makes the stored tensor and the Fn that views it as `shape` (the view is
// taken inside fn so the op sees the strides on the GPU too).
std::pair<Tensor, testing::Fn> viewed(const Shape& shape, uint64_t seed, DType dtype, View view,
                                      const testing::Fn& op) {
  switch (view) {
    case View::kContiguous:
      return {input(shape, seed, dtype), op};
    case View::kTransposed: {   // stored with the first and last dims swapped
      if (shape.size() < 2) break;
      Shape stored = shape;
      std::swap(stored.front(), stored.back());
      const int64_t last = static_cast<int64_t>(shape.size()) - 1;
      return {input(stored, seed, dtype),
              [op, last](const std::vector<Tensor>& in) { return op({in[0].transpose(0, last)}); }};
    }
    case View::kStepped: {      // every other element of a last dim twice as long
      if (shape.empty()) break;
      Shape stored = shape;
      stored.back() *= 2;
      const int64_t n = stored.back();
      return {input(stored, seed, dtype),
              [op, n](const std::vector<Tensor>& in) { return op({in[0].slice(-1, 0, n, 2)}); }};
    }
    case View::kBroadcast: {    // the first dim broadcast from size 1
      if (shape.empty() || shape.front() == 0) break;
      Shape stored = shape;
      stored.front() = 1;
      return {input(stored, seed, dtype),
              [op, shape](const std::vector<Tensor>& in) { return op({in[0].expand(shape)}); }};
    }
  }
  return {input(shape, seed, dtype), op};
}

const std::vector<Case>& sum_cases() {
  static const std::vector<Case> cases = {
      {{1}, {}},
      {{7}, {}},
      {{255}, {}},
      {{256}, {}},
      {{257}, {}},
      {{100000}, {}},            // two passes
      {{4, 7}, {1}},
      {{7, 4}, {0}, true},       // columns
      {{257, 33}, {1}},
      {{33, 257}, {0}},
      {{1000, 20}, {1}},         // short rows: several rows per block
      {{20, 1000}, {0}},         // short columns
      {{100000, 3}, {0}},        // long, narrow columns: two passes
      {{3, 100000}, {1}, true},  // long rows: two passes
      {{3, 255, 5}, {0, 2}},     // two reduced dims that do not merge
      {{2, 3, 4, 5}, {1, 3}},
      {{2, 3, 4, 5}, {}},
      {{64, 64, 64}, {0, 1}},
      {{0, 5}, {0}},             // empty reduction
      {{5, 0, 3}, {1}, true},
  };
  return cases;
}

void check_all_views(const Case& c, DType dtype, const testing::Fn& op, Tol tol, bool backward, uint64_t seed) {
  for (View view : {View::kContiguous, View::kTransposed, View::kStepped, View::kBroadcast}) {
    SCOPED_TRACE(name(c, dtype, view));
    auto [x, fn] = viewed(c.shape, seed, dtype, view, op);
    expect_cuda_matches_cpu(fn, {x}, tol.atol, tol.rtol, backward && is_floating(dtype));
  }
}

TEST(CudaReduceTest, SumMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    for (const Case& c : sum_cases()) {
      auto op = [c](const std::vector<Tensor>& in) { return sum(in[0], c.dims, c.keepdim); };
      check_all_views(c, dtype, op, tol_for(dtype, count_of(c.shape, c.dims)), /*backward=*/true, ++seed);
    }
  }
}

TEST(CudaReduceTest, SumOfAMillionIsNearTheCpuSum) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor x = random_tensor({1 << 20}, 7);
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x}, 1e-5 * 1024, 1e-5);
}

TEST(CudaReduceTest, IntegerSumsWrapIn64Bits) {
  ENCORE_SKIP_WITHOUT_GPU();
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor x = from_vector<int64_t>({big, 1, 5, big, big, -3}, {2, 3});
  for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1}}) {
    expect_cuda_matches_cpu([dims](const std::vector<Tensor>& in) { return sum(in[0], dims); }, {x}, 0, 0);
  }
  Tensor y = from_vector<int32_t>({2000000000, 2000000000, 7}, {3});   // i64 sum; sum_to wraps to i32
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum(in[0]); }, {y}, 0, 0);
  Tensor z = y.reshape({3, 1}).expand({3, 4});
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum_to(in[0], std::vector<int64_t>{1, 4}); },
                          {z.contiguous()}, 0, 0);
}

TEST(CudaReduceTest, SumToMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kInt32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = input({5, 257, 3}, 11, dtype);
    const Tol tol = tol_for(dtype, 5 * 3);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum_to(in[0], std::vector<int64_t>{257, 1}); },
                            {x}, tol.atol, tol.rtol, is_floating(dtype));
  }
}

TEST(CudaReduceTest, MeanMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const Case& c : sum_cases()) {
      auto op = [c](const std::vector<Tensor>& in) { return mean(in[0], c.dims, c.keepdim); };
      check_all_views(c, dtype, op, tol_for(dtype, count_of(c.shape, c.dims)), /*backward=*/true, ++seed);
    }
  }
}

TEST(CudaReduceTest, VarMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const Case& c : sum_cases()) {
      const int64_t count = count_of(c.shape, c.dims);
      if (count < 3) continue;   // correction >= count divides by 0: inf, compared elsewhere
      for (int64_t correction : {0, 1, 2}) {
        SCOPED_TRACE(absl::StrFormat("correction %d", correction));
        auto op = [c, correction](const std::vector<Tensor>& in) {
          return var(in[0], c.dims, correction, c.keepdim);
        };
        check_all_views(c, dtype, op, tol_for(dtype, 1), /*backward=*/correction == 1, ++seed);
      }
    }
  }
}

TEST(CudaReduceTest, EmptyReductionsGiveZeroOrNan) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor x = zeros({0, 4}).to(Device::cuda(0));
  EXPECT_EQ(sum(x, {0}).to(kCPU).to_vector<float>(), std::vector<float>(4, 0.0f));
  for (float v : mean(x, {0}).to(kCPU).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(sum(zeros({0}, kInt32).to(Device::cuda(0))).to(kCPU).to_vector<int64_t>(), std::vector<int64_t>{0});
  EXPECT_EQ(sum(x, {1}).numel(), 0);
}

// Inputs with many ties (small integers as floats) and NaNs.
Tensor tied(const Shape& shape, uint64_t seed, DType dtype) {
  return mul(random_tensor(shape, seed), 2.0).to(kInt32).to(dtype);
}

TEST(CudaReduceTest, MaxMatchesCpuWithFirstIndexTies) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1}, 0},      {{7}, 0},        {{255}, -1},     {{256}, 0},     {{257}, 0},      {{100000}, 0},
      {{4, 7}, 1},   {{7, 4}, 0},     {{257, 33}, 1},  {{33, 257}, 0}, {{1000, 20}, 1}, {{100000, 3}, 0},
      {{3, 100000}, 1}, {{3, 255, 5}, 1}, {{2, 3, 4, 5}, 2},
  };
  uint64_t seed = 300;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64}) {
    for (const auto& [shape, dim] : cases) {
      for (bool ties : {false, true}) {
        const Case c{shape, {dim}};
        for (View view : {View::kContiguous, View::kTransposed, View::kStepped, View::kBroadcast}) {
          SCOPED_TRACE(name(c, dtype, view) + (ties ? " ties" : ""));
          auto values = [dim](const std::vector<Tensor>& in) { return max(in[0], dim).first; };
          auto indices = [dim](const std::vector<Tensor>& in) { return max(in[0], dim, true).second; };
          auto arg = [dim](const std::vector<Tensor>& in) { return argmax(in[0], dim); };
          auto all = [](const std::vector<Tensor>& in) { return max(in[0]); };
          ++seed;
          const std::vector<testing::Fn> ops = {values, indices, arg, all};
          for (size_t k = 0; k < ops.size(); ++k) {
            auto [x, fn] = viewed(shape, seed, dtype, view, ops[k]);
            if (ties) x = tied(x.shape(), seed, dtype);
            // Values and indices are exact: max picks an element, first index on ties.
            // The values' backward goes through max_backward.
            expect_cuda_matches_cpu(fn, {x}, 0, 0, /*backward=*/k == 0 && is_floating(dtype));
          }
        }
      }
    }
  }
}

TEST(CudaReduceTest, MaxTreatsNanAsTheMaximumAndTheFirstNanWins) {
  ENCORE_SKIP_WITHOUT_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(600, 1.0f);
  v[3] = inf;
  v[250] = nan;
  v[400] = nan;
  v[599] = 2.0f;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = from_vector<float>(v, {2, 300}).to(dtype);   // row 0: inf at 3, NaN at 250; row 1: NaN at 100
    Tensor flat = from_vector<float>(v).to(dtype);
    for (int64_t dim : {0, 1}) {
      expect_cuda_matches_cpu([dim](const std::vector<Tensor>& in) { return max(in[0], dim).second; }, {x}, 0, 0);
      expect_cuda_matches_cpu([dim](const std::vector<Tensor>& in) { return max(in[0], dim).first; }, {x}, 0, 0);
    }
    Tensor idx = argmax(flat.to(Device::cuda(0)), 0).to(kCPU);
    EXPECT_EQ(idx.to_vector<int64_t>(), std::vector<int64_t>{250});
  }
}

TEST(CudaReduceTest, MaxBackwardScattersToTheSavedIndices) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t outer = 3, n = 257, inner = 5;
    Tensor grad_out = random_tensor({outer, inner}, 21, dtype);
    // Some indices outside [0, n): skipped on both backends.
    std::vector<int64_t> idx = {0, 256, 17, -1, 300, 5, 5, 128, 255, 1, 2, 3, 256, 0, 9};
    Tensor indices = from_vector<int64_t>(idx, {outer, inner});
    Tensor cpu_grad = empty({outer, n, inner}, dtype);
    Tensor gpu_grad = full({outer, n, inner}, 7.0, dtype, gpu);   // every element must be overwritten
    backend::max_backward(cpu_grad, grad_out, indices, outer, n, inner);
    backend::max_backward(gpu_grad, grad_out.to(gpu), indices.to(gpu), outer, n, inner);
    testing::expect_near(gpu_grad.to(kCPU), testing::values(cpu_grad), 0, 0);
  }
}

TEST(CudaReduceTest, ReductionsAreBitIdenticalRunToRun) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (const Shape& shape : {Shape{1 << 20}, Shape{100000, 3}, Shape{3, 100000}, Shape{1000, 257}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = random_tensor(shape, 31).to(gpu);
    const std::vector<int64_t> dims = shape.size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{0};
    EXPECT_EQ(sum(x, dims).to(kCPU).to_vector<float>(), sum(x, dims).to(kCPU).to_vector<float>());
    EXPECT_EQ(var(x, dims).to(kCPU).to_vector<float>(), var(x, dims).to(kCPU).to_vector<float>());
    EXPECT_EQ(argmax(x, 0).to(kCPU).to_vector<int64_t>(), argmax(x, 0).to(kCPU).to_vector<int64_t>());
  }
}

}  // namespace
}  // namespace encore
