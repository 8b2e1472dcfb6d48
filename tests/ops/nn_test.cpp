// softmax, log_softmax, cross_entropy, layer_norm, embedding and dropout:
// values against plain-loop double references, 16-bit dtypes against f32,
// gradients against finite differences, and every error path.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "encore/encore.h"
#include "src/core/philox.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_f32_rounded_once;
using testing::expect_near;
using testing::half_subnormal;
using testing::half_ulp;
using testing::random_tensor;
using testing::values;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// ---- references (double, plain loops) ----

// Sizes before, at and after dim of a row-major shape (0-d: all 1).
struct Split { int64_t outer = 1, n = 1, inner = 1; };
Split split_at(const Shape& shape, int64_t dim) {
  Split s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) s.outer *= shape[d];
    if (d == dim) s.n = shape[d];
    if (d > dim) s.inner *= shape[d];
  }
  return s;
}

std::vector<double> softmax_ref(const Tensor& x, int64_t dim, bool log) {
  if (dim < 0) dim += std::max<int64_t>(x.dim(), 1);
  const std::vector<double> v = values(x);
  std::vector<double> out(v.size());
  const Split s = split_at(x.shape(), dim);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < s.inner; ++j) {
      auto at = [&](int64_t k) { return (o * s.n + k) * s.inner + j; };
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < s.n; ++k) m = std::max(m, v[at(k)]);
      for (int64_t k = 0; k < s.n; ++k) sum += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < s.n; ++k) {
        out[at(k)] = log ? v[at(k)] - m - std::log(sum) : std::exp(v[at(k)] - m) / sum;
      }
    }
  }
  return out;
}

// Mean over counted rows of logsumexp - logit[target] (NaN if none), and its
// gradient for an upstream gradient of 1.
struct CrossEntropyRef { double loss = 0; std::vector<double> grad; };
CrossEntropyRef cross_entropy_ref(const Tensor& logits, const std::vector<int64_t>& target, int64_t ignore) {
  const std::vector<double> x = values(logits);
  const int64_t c = logits.size(-1), n = static_cast<int64_t>(target.size());
  CrossEntropyRef r;
  r.grad.assign(x.size(), 0.0);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += target[i] != ignore;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore) continue;
    double m = -1e300, s = 0;
    for (int64_t k = 0; k < c; ++k) m = std::max(m, x[i * c + k]);
    for (int64_t k = 0; k < c; ++k) s += std::exp(x[i * c + k] - m);
    const double lse = m + std::log(s);
    r.loss += (lse - x[i * c + target[i]]) / count;
    for (int64_t k = 0; k < c; ++k) {
      r.grad[i * c + k] = (std::exp(x[i * c + k] - lse) - (k == target[i] ? 1.0 : 0.0)) / count;
    }
  }
  if (count == 0) r.loss = std::nan("");
  return r;
}

// Rows of `cols` elements normalised; w, b empty means absent.
std::vector<double> layer_norm_ref(const Tensor& x, int64_t cols, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  const std::vector<double> v = values(x);
  std::vector<double> out(v.size());
  const int64_t rows = cols == 0 ? 0 : static_cast<int64_t>(v.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += v[r * cols + c] / cols;
    for (int64_t c = 0; c < cols; ++c) var += (v[r * cols + c] - mean) * (v[r * cols + c] - mean) / cols;
    for (int64_t c = 0; c < cols; ++c) {
      double y = (v[r * cols + c] - mean) / std::sqrt(var + eps);
      if (!w.empty()) y *= w[c];
      if (!b.empty()) y += b[c];
      out[r * cols + c] = y;
    }
  }
  return out;
}

// The gradients of layer_norm (no bias needed: db is the column sum of g) in
// double: dx = rstd (gw - mean(gw) - xh mean(gw xh)), dw = sum over rows of
// g xh, with xh = (x - mean) rstd and gw = g w. w empty means 1.
struct LayerNormGrads { std::vector<double> dx, dw; };
LayerNormGrads layer_norm_backward_ref(const Tensor& x, const Tensor& g, int64_t cols, const std::vector<double>& w,
                                       double eps) {
  const std::vector<double> v = values(x), gv = values(g);
  const int64_t rows = static_cast<int64_t>(v.size()) / cols;
  LayerNormGrads r{std::vector<double>(v.size()), std::vector<double>(cols, 0.0)};
  std::vector<double> xh(cols), gw(cols);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = v.data() + i * cols;
    const double* gr = gv.data() + i * cols;
    double mean = 0, var = 0, m1 = 0, m2 = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xr[c] / cols;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean) / cols;
    const double rstd = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c) {
      xh[c] = (xr[c] - mean) * rstd;
      gw[c] = gr[c] * (w.empty() ? 1.0 : w[c]);
      m1 += gw[c] / cols;
      m2 += gw[c] * xh[c] / cols;
      r.dw[c] += gr[c] * xh[c];
    }
    for (int64_t c = 0; c < cols; ++c) r.dx[i * cols + c] = rstd * (gw[c] - m1 - xh[c] * m2);
  }
  return r;
}

// ---- softmax, log_softmax ----

TEST(NnOpsTest, SoftmaxMatchesReferenceOverEveryDim) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 1, 7}, Shape{1, 5, 1}, Shape{4, 3, 70}}) {
    Tensor x = random_tensor(shape, 1) * 3.0;
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      SCOPED_TRACE(shape_str(shape) + " dim " + std::to_string(dim));
      expect_near(softmax(x, dim), softmax_ref(x, dim, false), 1e-6, 1e-5);
      expect_near(log_softmax(x, dim), softmax_ref(x, dim, true), 1e-5, 1e-5);
    }
  }
}

TEST(NnOpsTest, SoftmaxLargeTensorsTakeTheParallelPaths) {
  Tensor rows = random_tensor({64, 2048}, 2);          // last dim, several threads
  expect_near(softmax(rows, 1), softmax_ref(rows, 1, false), 1e-7, 1e-4);
  Tensor cols = random_tensor({6, 50, 130}, 3);        // inner 130: a full and a partial 64-column block
  expect_near(softmax(cols, 1), softmax_ref(cols, 1, false), 1e-7, 1e-4);
  expect_near(log_softmax(cols, 0), softmax_ref(cols, 0, true), 1e-5, 1e-5);
}

TEST(NnOpsTest, SoftmaxOfNonContiguousInputs) {
  Tensor x = random_tensor({4, 6, 5}, 4);
  Tensor nc = testing::non_contiguous(x);
  ASSERT_FALSE(nc.is_contiguous());
  expect_near(softmax(nc, 2), softmax_ref(x, 2, false), 1e-6, 1e-5);
  Tensor t = x.transpose(0, 2);                        // [5, 6, 4]
  expect_near(log_softmax(t, -1), softmax_ref(t.contiguous(), -1, true), 1e-5, 1e-5);
  Tensor s = x.slice(1, 1, 6, 2);                      // [4, 3, 5]
  expect_near(softmax(s, 1), softmax_ref(s.contiguous(), 1, false), 1e-6, 1e-5);
}

TEST(NnOpsTest, SoftmaxEdgeShapesAndLargeValues) {
  expect_near(softmax(scalar_tensor(2.5), 0), {1.0});
  expect_near(log_softmax(scalar_tensor(2.5), -1), {0.0});
  EXPECT_EQ(softmax(zeros({0, 3}), 1).shape(), Shape({0, 3}));
  EXPECT_EQ(log_softmax(zeros({2, 0}), 0).shape(), Shape({2, 0}));
  expect_near(softmax(ones({2, 3}), 1), std::vector<double>(6, 1.0 / 3));
  // Subtracting the row max keeps exp finite for large logits.
  Tensor big = from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  expect_near(softmax(big, 1), softmax_ref(big, 1, false), 1e-6, 1e-5);
  expect_near(log_softmax(big, 1), softmax_ref(big, 1, true), 1e-4, 1e-5);
  Tensor big_cols = big.t().contiguous();   // [3, 2] over dim 0: the strided-column path, a max per column
  expect_near(softmax(big_cols, 0), softmax_ref(big_cols, 0, false), 1e-6, 1e-5);
  expect_near(log_softmax(big_cols, 0), softmax_ref(big_cols, 0, true), 1e-4, 1e-5);
}

// log_softmax is (x - max) - log(sum), never x - (max + log(sum)): the
// latter rounds the row's log-sum-exp at the precision of its largest logit,
// so [o, o, o - 1] gave -0.8623 at o = 1e4, -0.875 at 1e6 and -1.0 at 1e7
// (exact -0.861995). Logits differing by whole numbers are exact in f32 up
// to 2^24; every offset must give the offset-free answer. Rows of the last
// dim (the row path) and dim 0 of [4, 3] (the strided-column path).
TEST(NnOpsTest, LogSoftmaxIsAccurateForLargeLogits) {
  const std::vector<float> deltas = {0, 0, -1, -3, -2, 0, -5, -1, 0, -4, -4, -2};
  for (float offset : {0.0f, 1e4f, 1e6f, 1e7f}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    std::vector<float> v;
    for (float d : deltas) v.push_back(offset + d);
    const Tensor rows = from_vector<float>(v, {3, 4});
    expect_near(log_softmax(rows, 1), softmax_ref(rows, 1, true), 1e-6, 1e-6);
    const Tensor cols = rows.t().contiguous();   // [4, 3] over dim 0: one max and sum per column
    expect_near(log_softmax(cols, 0), softmax_ref(cols, 0, true), 1e-6, 1e-6);
  }
}

TEST(NnOpsTest, SoftmaxHalfAndBFloat16AgreeWithFloat) {
  // Same (rounded) inputs; the tolerance covers one output rounding (2^-11, 2^-8) plus slack.
  for (auto [dt, tol] : {std::pair{kFloat16, 2e-3}, std::pair{kBFloat16, 1.6e-2}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = random_tensor({3, 8, 70}, 5, dt);
    Tensor xf = x.to(kFloat32);
    for (int64_t dim : {1, 2}) {
      Tensor y = softmax(x, dim);
      EXPECT_EQ(y.dtype(), dt);
      expect_near(y, softmax_ref(xf, dim, false), tol * 0.1, tol);
      expect_near(log_softmax(x, dim), softmax_ref(xf, dim, true), tol, tol);
    }
  }
}

TEST(NnOpsTest, SoftmaxGradientsMatchFiniteDifferences) {
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Tensor x = random_tensor({2, 3, 4}, 6);
    expect_gradients_match([dim](const auto& in) { return softmax(in[0], dim); }, {x});
    expect_gradients_match([dim](const auto& in) { return log_softmax(in[0], dim); }, {x});
  }
  // A non-contiguous upstream gradient (through transpose) and a non-contiguous input.
  Tensor x = random_tensor({3, 5}, 7);
  expect_gradients_match([](const auto& in) { return softmax(in[0], 0).t(); }, {x});
  expect_gradients_match([](const auto& in) { return log_softmax(in[0].t(), 1); }, {x});
}

TEST(NnOpsTest, SoftmaxBackwardInBFloat16AgreesWithFloat) {
  Tensor x = random_tensor({4, 9}, 8, kBFloat16);
  Tensor g = random_tensor({4, 9}, 9, kBFloat16);
  for (bool log : {false, true}) {
    Tensor a = x.clone().requires_grad_(), b = x.to(kFloat32).requires_grad_();
    (log ? log_softmax(a, 1) : softmax(a, 1)).backward(g);
    (log ? log_softmax(b, 1) : softmax(b, 1)).backward(g.to(kFloat32));
    EXPECT_EQ(a.grad().dtype(), kBFloat16);
    expect_near(a.grad(), values(b.grad()), 3e-2, 3e-2);
  }
}

// The backward of softmax (log: log_softmax) in double from the reference
// output: y (g - sum(g y)), or g - softmax * sum(g).
std::vector<double> softmax_backward_ref(const Tensor& x, const std::vector<double>& g, int64_t dim, bool log) {
  const std::vector<double> p = softmax_ref(x, dim, false);
  std::vector<double> out(p.size());
  const Split s = split_at(x.shape(), dim);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < s.inner; ++j) {
      auto at = [&](int64_t k) { return (o * s.n + k) * s.inner + j; };
      double sum = 0;
      for (int64_t k = 0; k < s.n; ++k) sum += log ? g[at(k)] : g[at(k)] * p[at(k)];
      for (int64_t k = 0; k < s.n; ++k) out[at(k)] = log ? g[at(k)] - p[at(k)] * sum : p[at(k)] * (g[at(k)] - sum);
    }
  }
  return out;
}

// include/encore/ops.h: a -inf entry gets probability exactly 0 (log_softmax:
// -inf) and the rest of its slice the softmax of the finite entries; its
// gradient is exactly 0 (log_softmax: exactly the upstream gradient, as
// d(x_i - lse)/dx_i = 1 - p_i = 1). A slice that is all -inf gives NaN,
// forward and backward, and leaves the other slices alone. Both the row
// path (last dim: 8-lane sums, 37 = 4 * 8 + a tail of 5) and the column path
// (dim 0), in every float dtype. Tolerance for the finite values: 1e-5 in
// f32; in f16/bf16 four roundings (test_util.h half_ulp), as the output is
// rounded once and the backward reads it rounded and rounds again.
TEST(NnOpsTest, SoftmaxOfMinusInfinityEntriesAndAllMinusInfinitySlices) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t n = 37;
  std::vector<float> v = random_tensor({3, n}, 65).to_vector<float>();
  for (int64_t k : {0, 5, 8, 31, 33, 36}) v[k] = -INFINITY;            // row 0: -inf in lanes and in the tail
  for (int64_t k = 0; k < n; ++k) v[n + k] = -INFINITY;                  // row 1: all -inf
  for (int64_t k = 0; k < n; ++k) if (k != 17) v[2 * n + k] = -INFINITY;   // row 2: one finite entry
  const Tensor rows = from_vector<float>(v, {3, n});
  const Tensor g0 = random_tensor({3, n}, 66);
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    const double tol = dt == kFloat32 ? 1e-5 : 4 * half_ulp(dt);
    for (int64_t dim : {1, 0}) {
      const Tensor x = (dim == 1 ? rows : rows.t().contiguous()).to(dt);   // dim 0 of [n, 3]: the column path
      const Tensor g = (dim == 1 ? g0 : g0.t().contiguous()).to(dt);
      const std::vector<double> xv = values(x), gv = values(g);
      for (bool log : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (log ? " log_softmax" : " softmax") + " dim " + std::to_string(dim));
        Tensor xi = x.detach().requires_grad_();
        const Tensor y = log ? log_softmax(xi, dim) : softmax(xi, dim);
        y.backward(g);
        const std::vector<double> yv = values(y), gx = values(xi.grad());
        expect_near(y, softmax_ref(x, dim, log), tol * 0.01, tol);   // NaN where the reference is (the all -inf slice)
        expect_near(xi.grad(), softmax_backward_ref(x, gv, dim, log), tol * 0.1, tol);
        for (size_t i = 0; i < xv.size(); ++i) {
          const bool slice_all_inf = (dim == 1 ? i / n : i % 3) == 1;
          if (slice_all_inf) {
            EXPECT_TRUE(std::isnan(yv[i]) && std::isnan(gx[i])) << i;
          } else if (xv[i] == -inf) {
            EXPECT_EQ(yv[i], log ? -inf : 0.0) << i;
            EXPECT_EQ(gx[i], log ? gv[i] : 0.0) << i;
          } else {
            EXPECT_TRUE(std::isfinite(yv[i]) && std::isfinite(gx[i])) << i;
          }
        }
      }
    }
  }
}

TEST(NnOpsTest, SoftmaxErrors) {
  Tensor x = zeros({2, 3, 4});
  expect_error([&] { (void)softmax(x, 3); }, kInvalid, {"softmax", "dim 3", "3-d"});
  expect_error([&] { (void)log_softmax(x, -4); }, kInvalid, {"log_softmax", "dim -4"});
  expect_error([] { (void)softmax(zeros({2, 3}, kInt32), 1); }, kInvalid, {"softmax", "[2, 3]", "i32"});
}

// ---- cross_entropy ----

TEST(NnOpsTest, CrossEntropyMatchesReferenceWithI32AndI64Targets) {
  Tensor logits = random_tensor({6, 5}, 10) * 2.0;
  const std::vector<int64_t> t = {0, 4, 2, 2, 1, 3};
  const CrossEntropyRef ref = cross_entropy_ref(logits, t, -100);
  for (DType dt : {kInt32, kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor target = from_vector<int64_t>(t).to(dt);
    Tensor x = logits.clone().requires_grad_();
    Tensor loss = cross_entropy(x, target);
    EXPECT_EQ(loss.dim(), 0);
    expect_near(loss, {ref.loss}, 1e-5, 1e-5);
    loss.backward();
    expect_near(x.grad(), ref.grad, 1e-6, 1e-5);
  }
}

TEST(NnOpsTest, CrossEntropyIgnoresTargets) {
  Tensor logits = random_tensor({5, 4}, 11);
  const std::vector<int64_t> t = {1, -100, 3, -100, 0};
  const CrossEntropyRef ref = cross_entropy_ref(logits, t, -100);
  Tensor x = logits.clone().requires_grad_();
  Tensor loss = cross_entropy(x, from_vector<int64_t>(t));
  expect_near(loss, {ref.loss}, 1e-5, 1e-5);
  loss.backward();
  expect_near(x.grad(), ref.grad, 1e-6, 1e-5);   // ignored rows: 0
  // A custom ignore_index, here a valid class id.
  const std::vector<int64_t> t2 = {1, 2, 3, 2, 0};
  expect_near(cross_entropy(logits, from_vector<int64_t>(t2).to(kInt32), 2), {cross_entropy_ref(logits, t2, 2).loss},
              1e-5, 1e-5);
}

// As PyTorch (and nll_loss): 0 / 0 = NaN, while the gradient stays 0.
TEST(NnOpsTest, CrossEntropyAllIgnoredIsNanWithZeroGradient) {
  Tensor x = random_tensor({3, 4}, 12).requires_grad_();
  Tensor loss = cross_entropy(x, from_vector<int32_t>({-100, -100, -100}));
  EXPECT_TRUE(std::isnan(values(loss)[0]));
  loss.backward();
  expect_near(x.grad(), std::vector<double>(12, 0.0));
  EXPECT_TRUE(std::isnan(values(cross_entropy(zeros({0, 4}), zeros({0}, kInt64)))[0]));
  EXPECT_TRUE(std::isnan(values(cross_entropy(x.to(kBFloat16), from_vector<int64_t>({-100, -100, -100})))[0]));
}

TEST(NnOpsTest, CrossEntropyOfHigherRankAndNonContiguousLogits) {
  Tensor logits = random_tensor({2, 3, 5}, 13);
  Tensor target = from_vector<int64_t>({4, 0, 1, -100, 2, 3}, {2, 3});
  const CrossEntropyRef ref = cross_entropy_ref(logits, target.to_vector<int64_t>(), -100);
  Tensor x = logits.clone().requires_grad_();
  Tensor loss = cross_entropy(x, target);
  expect_near(loss, {ref.loss}, 1e-5, 1e-5);
  loss.backward();
  EXPECT_EQ(x.grad().shape(), Shape({2, 3, 5}));
  expect_near(x.grad(), ref.grad, 1e-6, 1e-5);
  // [C, N] transposed to [N, C]; one unbatched row [C] with a 0-d target.
  Tensor t = random_tensor({5, 4}, 14).t();
  Tensor tt = from_vector<int64_t>({1, 4, 0, 2});
  expect_near(cross_entropy(t, tt), {cross_entropy_ref(t.contiguous(), {1, 4, 0, 2}, -100).loss}, 1e-5, 1e-5);
  Tensor row = random_tensor({5}, 15);
  expect_near(cross_entropy(row, scalar_tensor(3, kInt64)), {cross_entropy_ref(row, {3}, -100).loss}, 1e-5, 1e-5);
}

TEST(NnOpsTest, CrossEntropyBackwardReadsTheUpstreamGradient) {
  Tensor logits = random_tensor({4, 3}, 16);
  const std::vector<int64_t> t = {2, 0, -100, 1};
  const CrossEntropyRef ref = cross_entropy_ref(logits, t, -100);
  Tensor x = logits.clone().requires_grad_();
  cross_entropy(x, from_vector<int64_t>(t)).backward(scalar_tensor(-2.5));
  std::vector<double> expected = ref.grad;
  for (double& v : expected) v *= -2.5;
  expect_near(x.grad(), expected, 1e-6, 1e-5);
}

TEST(NnOpsTest, CrossEntropyGradientMatchesFiniteDifferences) {
  Tensor target = from_vector<int64_t>({2, -100, 0, 3, 3}, {5});
  expect_gradients_match([&](const auto& in) { return cross_entropy(in[0], target); },
                         {random_tensor({5, 4}, 17)});
  Tensor t3 = from_vector<int32_t>({1, 0, 2, 1}, {2, 2});
  expect_gradients_match([&](const auto& in) { return cross_entropy(in[0], t3); }, {random_tensor({2, 2, 3}, 18)});
}

TEST(NnOpsTest, CrossEntropyHalfAndBFloat16AgreeWithFloat) {
  Tensor target = from_vector<int64_t>({3, 1, 0, 6, 2, 5, 4, 1});
  for (auto [dt, tol] : {std::pair{kFloat16, 3e-3}, std::pair{kBFloat16, 2e-2}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor logits = random_tensor({8, 7}, 19, dt);
    Tensor loss = cross_entropy(logits, target);
    EXPECT_EQ(loss.dtype(), dt);
    expect_near(loss, {cross_entropy_ref(logits.to(kFloat32), target.to_vector<int64_t>(), -100).loss}, tol, tol);
  }
}

// f16/bf16 logits give the loss and gradient that f32 computes from the same
// (upcast) values, rounded once: the kernels compute in f32 and store once
// (include/encore/ops.h), so the tolerance is one rounding (test_util.h:
// half_ulp, and half_subnormal for f16 gradients below 2^-14, which many of
// these, p * 0.7 / 1714, are). 2000 rows of 50 classes (the threaded path),
// 1 in 7 ignored; the upstream gradient 0.7 is not a power of two.
TEST(NnOpsTest, CrossEntropyBackwardOfHalfDtypesIsTheF32GradientRounded) {
  const int64_t rows = 2000, classes = 50;
  std::vector<int64_t> t(rows);
  for (int64_t i = 0; i < rows; ++i) t[i] = i % 7 == 3 ? -100 : (i * 13) % classes;
  const Tensor target = from_vector<int64_t>(t);
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = (random_tensor({rows, classes}, 71) * 3.0).to(dt).requires_grad_();
    Tensor xf = x.detach().to(kFloat32).requires_grad_();
    const Tensor g = scalar_tensor(0.7, dt);
    const Tensor loss = cross_entropy(x, target), loss_f = cross_entropy(xf, target);
    expect_near(loss, values(loss_f), 0, half_ulp(dt));
    loss.backward(g);
    loss_f.backward(g.to(kFloat32));
    EXPECT_EQ(x.grad().dtype(), dt);
    expect_near(x.grad(), values(xf.grad()), half_subnormal(dt), half_ulp(dt));
  }
}

// include/encore/ops.h: a -inf logit takes probability exactly 0 (gradient
// exactly 0); a counted row whose target logit is -inf has loss +inf and a
// finite gradient; a counted row of all -inf logits makes the loss NaN (and
// that row's gradient), an ignored one counts for nothing.
TEST(NnOpsTest, CrossEntropyOfMinusInfinityLogits) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<float> v = random_tensor({4, 5}, 67).to_vector<float>();
  v[1] = v[3] = -INFINITY;                              // row 0: two -inf logits
  for (int k = 5; k < 10; ++k) v[k] = -INFINITY;        // row 1: all -inf
  v[12] = -INFINITY;                                    // row 2: one -inf logit
  const Tensor logits = from_vector<float>(v, {4, 5});
  struct Case { std::vector<int64_t> target; double loss; };   // loss: NaN, inf or 0 (finite: the reference)
  for (const Case& c : {Case{{0, -100, 4, 2}, 0}, Case{{0, -100, 2, 1}, inf}, Case{{0, 3, 4, 2}, std::nan("")}}) {
    for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " target[2] " + std::to_string(c.target[2]) + " target[1] " +
                   std::to_string(c.target[1]));
      const double tol = dt == kFloat32 ? 1e-5 : 4 * half_ulp(dt);
      Tensor x = logits.to(dt).detach().requires_grad_();
      const Tensor loss = cross_entropy(x, from_vector<int64_t>(c.target));
      loss.backward();
      const CrossEntropyRef ref = cross_entropy_ref(x.detach(), c.target, -100);
      const double l = values(loss)[0];
      if (std::isnan(c.loss)) EXPECT_TRUE(std::isnan(l)) << l;
      else if (std::isinf(c.loss)) EXPECT_EQ(l, inf);
      else expect_near(loss, {ref.loss}, tol, tol);
      const std::vector<double> gx = values(x.grad());
      for (int64_t i = 0; i < 20; ++i) {
        const int64_t r = i / 5;
        if (c.target[r] == -100) EXPECT_EQ(gx[i], 0.0) << i;
        else if (r == 1) EXPECT_TRUE(std::isnan(gx[i])) << i;        // counted all -inf row
        else if (v[i] == -INFINITY && i % 5 != c.target[r]) EXPECT_EQ(gx[i], 0.0) << i;
        else EXPECT_NEAR(gx[i], ref.grad[i], tol) << i;         // finite, the target's -inf logit too
      }
    }
  }
}

// cross_entropy keeps each row's max and log-sum apart (as log_softmax):
// the loss is log(sum) - (x[t] - max), the gradient exp((x - max) - log(sum))
// - onehot. With max + log(sum) rounded at the precision of the max, the
// gradient of [1e7, 1e7, 1e7 - 1] with target 2 was [0.3679, 0.3679,
// -0.8647], summing to -0.13 (not [0.4223, 0.4223, -0.8446]), and the loss
// 2 instead of 1.862. Three rows, each against the double reference and
// summing to 0 (to 1e-7).
TEST(NnOpsTest, CrossEntropyIsAccurateForLargeLogits) {
  const std::vector<float> deltas = {0, 0, -1, -3, -2, 0, -5, -1, 0, -4, -4, -2};
  const std::vector<int64_t> target = {2, 1, 3};
  for (float offset : {0.0f, 1e4f, 1e6f, 1e7f}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    std::vector<float> v;
    for (float d : deltas) v.push_back(offset + d);
    Tensor x = from_vector<float>(v, {3, 4}).requires_grad_();
    const CrossEntropyRef ref = cross_entropy_ref(x.detach(), target, -100);
    const Tensor loss = cross_entropy(x, from_vector<int64_t>(target));
    expect_near(loss, {ref.loss}, 1e-6, 1e-6);
    loss.backward();
    expect_near(x.grad(), ref.grad, 1e-7, 1e-6);
    const std::vector<double> g = values(x.grad());
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(g[4 * r] + g[4 * r + 1] + g[4 * r + 2] + g[4 * r + 3], 0.0, 1e-7) << r;
  }
}

TEST(NnOpsTest, CrossEntropyErrors) {
  Tensor logits = zeros({4, 3});
  expect_error([&] { (void)cross_entropy(logits, zeros({3}, kInt64)); }, kInvalid,
               {"cross_entropy", "target shape [3]", "[4, 3]"});
  expect_error([&] { (void)cross_entropy(logits, from_vector<int64_t>({0, 1, 3, 2})); }, kInvalid,
               {"cross_entropy", "target class 3", "C = 3"});
  expect_error([&] { (void)cross_entropy(logits, from_vector<int32_t>({0, -1, 1, 2})); }, kInvalid,
               {"cross_entropy", "target class -1", "C = 3"});
  expect_error([&] { (void)cross_entropy(logits, zeros({4})); }, kInvalid, {"cross_entropy", "[4]", "f32"});
  expect_error([&] { (void)cross_entropy(zeros({4, 3}, kInt32), zeros({4}, kInt64)); }, kInvalid,
               {"cross_entropy", "[4, 3]", "i32"});
  expect_error([] { (void)cross_entropy(scalar_tensor(1.0), zeros({}, kInt64)); }, kInvalid,
               {"cross_entropy", "0-d"});
}

// ---- layer_norm ----

TEST(NnOpsTest, LayerNormMatchesReferenceWithAndWithoutAffine) {
  Tensor x = random_tensor({5, 6}, 20) * 2.0 + 1.0;
  Tensor w = random_tensor({6}, 21), b = random_tensor({6}, 22);
  expect_near(layer_norm(x, {6}), layer_norm_ref(x, 6, {}, {}, 1e-5), 1e-5, 1e-5);
  expect_near(layer_norm(x, {6}, w), layer_norm_ref(x, 6, values(w), {}, 1e-5), 1e-5, 1e-5);
  expect_near(layer_norm(x, {6}, Tensor(), b), layer_norm_ref(x, 6, {}, values(b), 1e-5), 1e-5, 1e-5);
  expect_near(layer_norm(x, {6}, w, b, 0.1), layer_norm_ref(x, 6, values(w), values(b), 0.1), 1e-5, 1e-5);
}

TEST(NnOpsTest, LayerNormOverSeveralTrailingDimsAndNonContiguousInput) {
  Tensor x = random_tensor({2, 3, 4}, 23);
  Tensor w = random_tensor({3, 4}, 24), b = random_tensor({3, 4}, 25);
  expect_near(layer_norm(x, {3, 4}, w, b), layer_norm_ref(x, 12, values(w), values(b), 1e-5), 1e-5, 1e-5);
  expect_near(layer_norm(x, {2, 3, 4}), layer_norm_ref(x, 24, {}, {}, 1e-5), 1e-5, 1e-5);
  Tensor nc = x.transpose(0, 2);   // [4, 3, 2]
  expect_near(layer_norm(nc, {2}), layer_norm_ref(nc.contiguous(), 2, {}, {}, 1e-5), 1e-5, 1e-5);
  EXPECT_EQ(layer_norm(zeros({0, 4}), {4}).shape(), Shape({0, 4}));
  expect_near(layer_norm(from_vector<float>({3, 3, 3}), {3}), {0, 0, 0});   // zero variance: eps keeps it finite
}

// Rows whose spread is tiny next to their mean. Constant rows normalise to
// exactly 0 (weight and bias: exactly the bias), and dweight gets exactly 0
// from them, in every dtype; rows of c + 1e-3 noise match the plain-loop
// double reference to the tolerance of random rows (1e-5; dx, which reaches
// rstd |g| ~ 2000 here, to 1e-5 rstd absolute). 3, 7, 64, 768 and 1000
// columns: 8-lane sums with and without tails. Before the shifted mean
// (NOTE [ Layer norm's shifted mean ] in src/backends/kernel_table.h) the
// f32 mean's rounding error times rstd = 316 put constant rows up to 0.03
// and near-constant rows up to 0.02 off; now at most 1.2e-7.
TEST(NnOpsTest, LayerNormOfConstantAndNearConstantRows) {
  for (int64_t cols : {3, 7, 64, 768, 1000}) {
    const std::vector<float> noise = random_tensor({cols}, 68).to_vector<float>();
    const Tensor w = random_tensor({cols}, 69), b = random_tensor({cols}, 70);
    for (double base : {1000.0, -77.7, 0.1, 3e-3, 1e4}) {
      SCOPED_TRACE("cols " + std::to_string(cols) + " base " + std::to_string(base));
      std::vector<float> v(2 * cols);
      for (int64_t c = 0; c < cols; ++c) {
        v[c] = static_cast<float>(base);
        v[cols + c] = static_cast<float>(base + 1e-3 * noise[c]);
      }
      const Tensor x = from_vector<float>(v, {2, cols});
      for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
        SCOPED_TRACE(std::string(dtype_name(dt)));
        const Tensor constant = x.slice(0, 0, 1).to(dt);
        EXPECT_EQ(values(layer_norm(constant, {cols})), std::vector<double>(cols, 0.0));
        Tensor wi = w.to(dt).detach().requires_grad_();
        const Tensor y = layer_norm(constant, {cols}, wi, b.to(dt));
        EXPECT_EQ(values(y), values(b.to(dt)));
        y.backward(random_tensor({1, cols}, 71, dt));
        EXPECT_EQ(values(wi.grad()), std::vector<double>(cols, 0.0));
      }
      expect_near(layer_norm(x, {cols}), layer_norm_ref(x, cols, {}, {}, 1e-5), 1e-5, 1e-5);
      Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_();
      const Tensor g = random_tensor({2, cols}, 72);
      layer_norm(xi, {cols}, wi).backward(g);
      const LayerNormGrads ref = layer_norm_backward_ref(x, g, cols, values(w), 1e-5);
      expect_near(xi.grad(), ref.dx, 1e-5 * 316, 1e-5);
      expect_near(wi.grad(), ref.dw, 1e-5, 1e-5);
    }
  }
}

TEST(NnOpsTest, LayerNormHalfAndBFloat16AgreeWithFloat) {
  for (auto [dt, tol] : {std::pair{kFloat16, 4e-3}, std::pair{kBFloat16, 3e-2}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = random_tensor({7, 33}, 26, dt), w = random_tensor({33}, 27, dt), b = random_tensor({33}, 28, dt);
    Tensor y = layer_norm(x, {33}, w, b);
    EXPECT_EQ(y.dtype(), dt);
    expect_near(y, layer_norm_ref(x.to(kFloat32), 33, values(w), values(b), 1e-5), tol, tol);
  }
}

TEST(NnOpsTest, LayerNormGradientsMatchFiniteDifferences) {
  expect_gradients_match([](const auto& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
                         {random_tensor({3, 4}, 29), random_tensor({4}, 30), random_tensor({4}, 31)});
  expect_gradients_match([](const auto& in) { return layer_norm(in[0], {2, 3}, in[1], in[2]); },
                         {random_tensor({2, 2, 3}, 32), random_tensor({2, 3}, 33), random_tensor({2, 3}, 34)});
  expect_gradients_match([](const auto& in) { return layer_norm(in[0], {5}); }, {random_tensor({2, 5}, 35)});
  expect_gradients_match([](const auto& in) { return layer_norm(in[0].t(), {3}, Tensor(), in[1]); },
                         {random_tensor({3, 2}, 36), random_tensor({3}, 37)});
}

TEST(NnOpsTest, LayerNormParameterGradientsAreDeterministicSums) {
  // 3000 rows: 64 row blocks of partial sums. The result must not depend on the thread count.
  Tensor x = random_tensor({3000, 40}, 38), g = random_tensor({3000, 40}, 39);
  std::vector<double> expected_w(40, 0.0), expected_b(40, 0.0);
  const std::vector<double> xn = layer_norm_ref(x, 40, {}, {}, 1e-5), gv = values(g);
  for (int64_t i = 0; i < 3000 * 40; ++i) {
    expected_w[i % 40] += gv[i] * xn[i];
    expected_b[i % 40] += gv[i];
  }
  std::vector<std::vector<float>> runs;
  const int threads = omp_get_max_threads();
  for (int n : {1, 2, 1}) {
    omp_set_num_threads(n);
    Tensor w = ones({40}).requires_grad_(), b = zeros({40}).requires_grad_();
    layer_norm(x, {40}, w, b).backward(g);
    expect_near(w.grad(), expected_w, 1e-3, 1e-4);
    expect_near(b.grad(), expected_b, 1e-3, 1e-4);
    runs.push_back(w.grad().to_vector<float>());
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// softmax, log_softmax and layer_norm (forward and backward) run their rows
// through 8-lane vector sums and maxima (a clone per x86-64 level) split by
// rows over the threads: the bits must not depend on the thread count.
TEST(NnOpsTest, SoftmaxAndLayerNormBitsDoNotDependOnThreads) {
  const Tensor x = random_tensor({512, 333}, 61), g = random_tensor({512, 333}, 62);
  const Tensor w = random_tensor({333}, 63), b = random_tensor({333}, 64);
  std::vector<std::vector<float>> runs[2];
  for (int threads : {1, 2}) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (int op = 0; op < 3; ++op) {
      Tensor xi = x.detach().requires_grad_();
      Tensor wi = w.detach().requires_grad_(), bi = b.detach().requires_grad_();
      Tensor y = op == 0 ? softmax(xi, -1) : op == 1 ? log_softmax(xi, -1) : layer_norm(xi, {333}, wi, bi);
      y.backward(g);
      runs[threads - 1].push_back(y.detach().to_vector<float>());
      runs[threads - 1].push_back(xi.grad().to_vector<float>());
      if (op == 2) runs[threads - 1].push_back(wi.grad().to_vector<float>());
    }
    omp_set_num_threads(before);
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * sizeof(float)), 0) << "output " << i;
  }
}

// f16/bf16 layer_norm (forward, dx, dweight and dbias) is the f32 result of
// the same (upcast) values rounded once (tolerance: one rounding, test_util.h
// half_ulp): the statistics and every sum are f32. 2000 rows: dweight and
// dbias are sums over 2000 rows in 64 partial blocks, each row's dx needs two
// sums over 96 columns; a sum rounded to f16/bf16 on the way fails by far.
TEST(NnOpsTest, LayerNormBackwardOfHalfDtypesIsTheF32GradientRounded) {
  const int64_t rows = 2000, cols = 96;
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = (random_tensor({rows, cols}, 72) * 2.0 + 0.5).to(dt).requires_grad_();
    Tensor w = random_tensor({cols}, 73, dt).requires_grad_(), b = random_tensor({cols}, 74, dt).requires_grad_();
    Tensor xf = x.detach().to(kFloat32).requires_grad_();
    Tensor wf = w.detach().to(kFloat32).requires_grad_(), bf = b.detach().to(kFloat32).requires_grad_();
    const Tensor g = random_tensor({rows, cols}, 75, dt);
    const Tensor y = layer_norm(x, {cols}, w, b), yf = layer_norm(xf, {cols}, wf, bf);
    expect_near(y, values(yf), half_subnormal(dt), half_ulp(dt));
    y.backward(g);
    yf.backward(g.to(kFloat32));
    expect_f32_rounded_once(dt, {{"dx", x.grad(), xf.grad()}, {"dweight", w.grad(), wf.grad()},
                                 {"dbias", b.grad(), bf.grad()}});
  }
}

TEST(NnOpsTest, LayerNormErrors) {
  Tensor x = zeros({2, 3, 4});
  expect_error([&] { (void)layer_norm(x, {3}); }, kInvalid, {"layer_norm", "normalized_shape [3]", "[2, 3, 4]"});
  expect_error([&] { (void)layer_norm(x, {1, 2, 3, 4}); }, kInvalid, {"layer_norm", "[1, 2, 3, 4]", "[2, 3, 4]"});
  expect_error([&] { (void)layer_norm(x, {4}, zeros({3})); }, kInvalid,
               {"layer_norm", "weight of shape [3]", "normalized_shape [4]"});
  expect_error([&] { (void)layer_norm(x, {3, 4}, Tensor(), zeros({4})); }, kInvalid,
               {"layer_norm", "bias of shape [4]", "[3, 4]"});
  expect_error([&] { (void)layer_norm(x, {4}, zeros({4}, kFloat16)); }, kInvalid, {"layer_norm", "f32", "f16"});
  expect_error([] { (void)layer_norm(zeros({2, 4}, kInt64), {4}); }, kInvalid, {"layer_norm", "[2, 4]", "i64"});
  // An empty normalized_shape is an error in PyTorch ("Expected normalized_shape to be at least
  // 1-dimensional"), not a normalization of each element alone (which gave 0 everywhere).
  expect_error([&] { (void)layer_norm(x, {}); }, kInvalid, {"layer_norm", "normalized_shape", "[]", "[2, 3, 4]"});
  expect_error([] { (void)layer_norm(scalar_tensor(3.0), {}); }, kInvalid, {"layer_norm", "[]"});
}

// ---- embedding ----

TEST(NnOpsTest, EmbeddingGathersRowsForI32AndI64Indices) {
  Tensor w = random_tensor({7, 3}, 40);
  const std::vector<double> wv = values(w);
  const std::vector<int64_t> ids = {6, 0, 3, 3, 1, 6};
  for (DType dt : {kInt32, kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor out = embedding(w, from_vector<int64_t>(ids, {2, 3}).to(dt));
    EXPECT_EQ(out.shape(), Shape({2, 3, 3}));
    std::vector<double> expected;
    for (int64_t id : ids) expected.insert(expected.end(), wv.begin() + id * 3, wv.begin() + id * 3 + 3);
    expect_near(out, expected, 0, 0);
  }
  Tensor one = embedding(w, scalar_tensor(2, kInt64));
  EXPECT_EQ(one.shape(), Shape({3}));
  expect_near(one, {wv[6], wv[7], wv[8]}, 0, 0);
  EXPECT_EQ(embedding(w, zeros({0, 2}, kInt32)).shape(), Shape({0, 2, 3}));
  // A non-contiguous weight and 16-bit rows are copied exactly.
  Tensor wt = random_tensor({3, 7}, 41).t();
  expect_near(embedding(wt, from_vector<int32_t>({5})), values(wt.slice(0, 5, 6)), 0, 0);
  Tensor wh = w.to(kBFloat16);
  expect_near(embedding(wh, from_vector<int32_t>({4})), values(wh.slice(0, 4, 5)), 0, 0);
}

TEST(NnOpsTest, EmbeddingGradientAccumulatesRepeatedIndices) {
  Tensor w = random_tensor({6, 4}, 42).requires_grad_();
  const std::vector<int64_t> ids = {2, 5, 2, 0, 2, 5};
  Tensor g = random_tensor({3, 2, 4}, 43);
  embedding(w, from_vector<int64_t>(ids, {3, 2})).backward(g);
  std::vector<double> expected(24, 0.0);
  const std::vector<double> gv = values(g);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < 4; ++c) expected[ids[i] * 4 + c] += gv[i * 4 + c];
  }
  expect_near(w.grad(), expected, 1e-6, 1e-6);   // rows 1, 3, 4 unused: 0
  // Large enough for the threaded path (threads own vocab row ranges).
  Tensor big = zeros({500, 64}).requires_grad_();
  std::vector<int32_t> many(2000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>((i * 37) % 500);
  embedding(big, from_vector<int32_t>(many)).backward(ones({2000, 64}));
  expect_near(big.grad(), std::vector<double>(500 * 64, 4.0), 0, 0);   // each row used 4 times
}

// f16/bf16 gradients of repeated indices sum in f32 and round once
// (include/encore/ops.h): 3000 rows into 3 give the f32 sums of the same
// gradients within one rounding. Rounded at each add, a bf16 sum of ones
// stopped at 256 (1 is half an ulp there).
TEST(NnOpsTest, EmbeddingGradientOfHalfAndBFloat16SumsRepeatedIndicesInF32) {
  const int64_t n = 3000, vocab = 5, dim = 16;   // (vocab + n) * dim above the grain: the threaded path
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i % 3;   // rows 3 and 4 unused
  const Tensor idx = from_vector<int64_t>(ids);
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const double half_ulp = std::ldexp(1.0, dt == kFloat16 ? -11 : -8);   // relative
    for (const Tensor& g : {ones({n, dim}, dt), random_tensor({n, dim}, 45, dt)}) {
      Tensor w = zeros({vocab, dim}, dt).requires_grad_();
      embedding(w, idx).backward(g);
      Tensor wf = zeros({vocab, dim}).requires_grad_();
      embedding(wf, idx).backward(g.to(kFloat32));
      EXPECT_EQ(w.grad().dtype(), dt);
      expect_near(w.grad(), values(wf.grad()), 0, half_ulp);
    }
  }
}

TEST(NnOpsTest, EmbeddingGradientMatchesFiniteDifferences) {
  Tensor ids = from_vector<int32_t>({1, 3, 1, 0}, {2, 2});
  expect_gradients_match([&](const auto& in) { return embedding(in[0], ids); }, {random_tensor({4, 3}, 44)});
}

TEST(NnOpsTest, EmbeddingErrors) {
  Tensor w = zeros({5, 2});
  expect_error([&] { (void)embedding(w, from_vector<int64_t>({0, 5})); }, kInvalid,
               {"embedding", "index 5", "V = 5"});
  expect_error([&] { (void)embedding(w, from_vector<int32_t>({-1})); }, kInvalid, {"embedding", "index -1", "V = 5"});
  expect_error([] { (void)embedding(zeros({5}), from_vector<int64_t>({0})); }, kInvalid, {"embedding", "2-D", "[5]"});
  expect_error([&] { (void)embedding(w, zeros({2})); }, kInvalid, {"embedding", "i32 or i64", "f32"});
}

// An output whose size overflows is refused naming embedding (issue #17):
// two rows of a broadcast [1, 2^62] weight.
TEST(NnOpsTest, EmbeddingWhoseOutputOverflowsIsRefused) {
  const Tensor w = ones({1, 1}).expand({1, int64_t{1} << 62});
  expect_error([&] { (void)embedding(w, zeros({2}, kInt64)); }, absl::StatusCode::kInvalidArgument,
               {"embedding", "[2, 4611686018427387904]", "2^63 elements"});
}

// ---- dropout ----

TEST(NnOpsTest, DropoutZeroesAboutPAndScalesSurvivors) {
  const double p = 0.3;
  Tensor x = random_tensor({200, 500}, 50);
  Generator g(11);
  Tensor y = dropout(x, p, true, &g);
  const std::vector<double> xv = values(x), yv = values(y);
  int64_t zeros_n = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.0) {
      ++zeros_n;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / (1 - p), 1e-6 * (1 + std::abs(xv[i]))) << i;
    }
  }
  // 100000 Bernoulli(0.3) draws: std of the fraction ~0.0015.
  EXPECT_NEAR(static_cast<double>(zeros_n) / xv.size(), p, 0.01);
  EXPECT_EQ(g.offset(), 100000u);
}

TEST(NnOpsTest, DropoutMaskIsPhiloxWordZeroAtOffsetPlusIndex) {
  Generator g(1234);
  Tensor x = ones({3000});
  (void)dropout(x, 0.5, true, &g);   // moves the offset to 3000
  Tensor y = dropout(x, 0.5, true, &g);
  const std::vector<double> yv = values(y);
  for (int64_t i = 0; i < 3000; ++i) {
    const philox::Block r = philox::philox4x32(3000 + static_cast<uint64_t>(i), 1234);
    const bool keep = philox::uniform(r.x[0]) >= 0.5f;
    ASSERT_EQ(yv[i], keep ? 2.0 : 0.0) << i;
  }
  EXPECT_EQ(g.offset(), 6000u);
}

TEST(NnOpsTest, DropoutIsReproducibleFromTheSeedAndFreshOnTheNextCall) {
  Tensor x = random_tensor({40, 50}, 51);
  Generator g(7);
  std::vector<float> a = dropout(x, 0.5, true, &g).to_vector<float>();
  std::vector<float> b = dropout(x, 0.5, true, &g).to_vector<float>();
  EXPECT_NE(a, b);
  g.manual_seed(7);
  EXPECT_EQ(dropout(x, 0.5, true, &g).to_vector<float>(), a);
  // The default generator when none is given.
  manual_seed(99);
  std::vector<float> c = dropout(x, 0.5).to_vector<float>();
  EXPECT_EQ(default_generator().offset(), 2000u);
  manual_seed(99);
  EXPECT_EQ(dropout(x, 0.5).to_vector<float>(), c);
}

TEST(NnOpsTest, DropoutInEvalModeOrWithPZeroIsIdentity) {
  Tensor x = random_tensor({3, 4}, 52);
  Generator g(3);
  EXPECT_TRUE(dropout(x, 0.5, false, &g).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, &g).is_same(x));
  EXPECT_EQ(g.offset(), 0u);   // nothing drawn
}

TEST(NnOpsTest, DropoutBackwardUsesTheForwardMask) {
  const double p = 0.25;
  Tensor x = random_tensor({30, 40}, 53).requires_grad_();
  Generator g(5);
  Tensor y = dropout(x.t(), p, true, &g);   // a non-contiguous input: [40, 30]
  Tensor up = random_tensor({40, 30}, 54);
  y.backward(up);
  const std::vector<double> yv = values(y), gv = values(x.grad().t()), uv = values(up);
  for (size_t i = 0; i < yv.size(); ++i) {
    EXPECT_NEAR(gv[i], yv[i] == 0.0 ? 0.0 : uv[i] / (1 - p), 1e-5) << i;
  }
  expect_gradients_match(
      [&](const auto& in) {
        g.manual_seed(17);   // every evaluation draws the same mask
        return dropout(in[0], 0.4, true, &g);
      },
      {random_tensor({4, 5}, 55)});
}

TEST(NnOpsTest, DropoutOfHalfAndBFloat16) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = random_tensor({1000}, 56, dt);
    Generator g1(8), g2(8);
    Tensor y = dropout(x, 0.5, true, &g1);
    EXPECT_EQ(y.dtype(), dt);
    // Same mask as f32 (same seed); x / 0.5 is exact in any float format.
    expect_near(y, values(dropout(x.to(kFloat32), 0.5, true, &g2)), 0, 0);
  }
}

// f16/bf16 dropout's gradient is g * 1/(1 - p) computed in f32 and rounded
// once (tolerance: one rounding, test_util.h half_ulp). p = 0.3: the scale
// 1/0.7 is not a power of two, so every kept gradient is rounded; the same
// seed draws the same mask in every dtype.
TEST(NnOpsTest, DropoutBackwardOfHalfDtypesIsTheF32GradientRounded) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = random_tensor({5000}, 76, dt).requires_grad_();
    Tensor xf = x.detach().to(kFloat32).requires_grad_();
    const Tensor g = random_tensor({5000}, 77, dt);
    Generator g1(9), g2(9);
    const Tensor y = dropout(x, 0.3, true, &g1), yf = dropout(xf, 0.3, true, &g2);
    expect_near(y, values(yf), half_subnormal(dt), half_ulp(dt));
    y.backward(g);
    yf.backward(g.to(kFloat32));
    EXPECT_EQ(x.grad().dtype(), dt);
    expect_near(x.grad(), values(xf.grad()), half_subnormal(dt), half_ulp(dt));
  }
}

// p = 1 drops everything, as PyTorch (it used to be refused): zeros, NaN
// included, a zero gradient, and the generator does not advance.
TEST(NnOpsTest, DropoutOfOneGivesZeros) {
  Tensor x = from_vector<float>({1, std::nanf(""), -3, INFINITY}).requires_grad_();
  Generator gen(7);
  const std::vector<double> state = values(gen.state());
  Tensor y = dropout(x, 1.0, true, &gen);
  expect_near(y, {0, 0, 0, 0}, 0, 0);
  (y * 3.0).sum().backward();
  expect_near(x.grad(), {0, 0, 0, 0}, 0, 0);
  EXPECT_EQ(values(gen.state()), state);
  expect_near(dropout(x, 1.0, false), values(x), 0, 0);   // eval: the input
}

TEST(NnOpsTest, DropoutErrors) {
  Tensor x = zeros({2, 3});
  for (double p : {-0.1, 1.5, std::nan("")}) {
    expect_error([&] { (void)dropout(x, p); }, kInvalid, {"dropout", "[0, 1]", "[2, 3]"});
  }
  expect_error([] { (void)dropout(zeros({2}, kInt32), 0.5); }, kInvalid, {"dropout", "[2]", "i32"});
}

}  // namespace
}  // namespace encore
