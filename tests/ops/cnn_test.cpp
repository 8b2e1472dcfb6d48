// conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, batch_norm and
// flatten: values against plain-loop double references over several stride /
// padding / dilation / groups combinations, 16-bit dtypes against f32,
// gradients against finite differences, running statistics over several
// steps against a loop, determinism, and the error paths.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "encore/encore.h"
#include "src/backends/kernels.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::random_tensor;
using testing::values;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// ---- references (double, plain loops) ----

struct ConvCase {
  int64_t n, c, h, w, k, kh, kw;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& p, Shape& out_shape) {
  const auto xv = values(x), wv = values(w);
  const std::vector<double> bv = b.defined() ? values(b) : std::vector<double>(p.k, 0.0);
  const int64_t oh = (p.h + 2 * p.padding.h - p.dilation.h * (p.kh - 1) - 1) / p.stride.h + 1;
  const int64_t ow = (p.w + 2 * p.padding.w - p.dilation.w * (p.kw - 1) - 1) / p.stride.w + 1;
  out_shape = {p.n, p.k, oh, ow};
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  std::vector<double> out(p.n * p.k * oh * ow);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = bv[k];
          const int64_t g = k / kg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < p.kh; ++r)
              for (int64_t q = 0; q < p.kw; ++q) {
                const int64_t ih = i * p.stride.h - p.padding.h + r * p.dilation.h;
                const int64_t iw = j * p.stride.w - p.padding.w + q * p.dilation.w;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                s += xv[((n * p.c + g * cg + c) * p.h + ih) * p.w + iw] * wv[((k * cg + c) * p.kh + r) * p.kw + q];
              }
          out[((n * p.k + k) * oh + i) * ow + j] = s;
        }
  return out;
}

const ConvCase kConvCases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, true},
    {2, 4, 8, 8, 6, 3, 3, 2, 1, 1, 1, true},
    {1, 4, 9, 7, 4, 3, 2, {2, 1}, {1, 0}, {2, 1}, 2, false},
    {2, 6, 6, 6, 6, 3, 3, 1, 1, 1, 6, true},   // depthwise
    {3, 2, 5, 5, 3, 1, 1, 1, 0, 1, 1, true},   // 1x1
    {1, 4, 10, 10, 8, 5, 5, 3, 2, 2, 2, true},
};

class Conv2dTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dTest, ForwardMatchesLoops) {
  const ConvCase p = GetParam();
  Tensor x = random_tensor({p.n, p.c, p.h, p.w}, 1);
  Tensor w = random_tensor({p.k, p.c / p.groups, p.kh, p.kw}, 2);
  Tensor b = p.bias ? random_tensor({p.k}, 3) : Tensor();
  Shape shape;
  const std::vector<double> ref = conv_ref(x, w, b, p, shape);
  Tensor y = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
  ASSERT_EQ(y.shape(), shape);
  expect_near(y, ref, 1e-4, 1e-4);
  // Non-contiguous input: copied first, same values.
  expect_near(conv2d(testing::non_contiguous(x), w, b, p.stride, p.padding, p.dilation, p.groups), ref, 1e-4, 1e-4);
}

TEST_P(Conv2dTest, BackwardMatchesFiniteDifferences) {
  const ConvCase p = GetParam();
  Tensor x = random_tensor({std::min<int64_t>(p.n, 2), p.c, p.h, p.w}, 4);
  Tensor w = random_tensor({p.k, p.c / p.groups, p.kh, p.kw}, 5);
  std::vector<Tensor> in = {x, w};
  if (p.bias) in.push_back(random_tensor({p.k}, 6));
  expect_gradients_match(
      [p](const std::vector<Tensor>& t) {
        return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), p.stride, p.padding, p.dilation, p.groups);
      },
      in);
}

TEST_P(Conv2dTest, HalfDtypesMatchF32) {
  const ConvCase p = GetParam();
  for (DType dt : {kBFloat16, kFloat16}) {
    Tensor x = random_tensor({p.n, p.c, p.h, p.w}, 7).to(dt);
    Tensor w = random_tensor({p.k, p.c / p.groups, p.kh, p.kw}, 8).to(dt);
    Tensor b = p.bias ? random_tensor({p.k}, 9).to(dt) : Tensor();
    Tensor y = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
    EXPECT_EQ(y.dtype(), dt);
    // The f32 result of the same rounded inputs, rounded once: within one 16-bit ulp.
    Tensor y32 = conv2d(x.to(kFloat32), w.to(kFloat32), b.defined() ? b.to(kFloat32) : Tensor(), p.stride,
                        p.padding, p.dilation, p.groups);
    expect_near(y.to(kFloat32), values(y32.to(dt)), 0.0, 0.0);
    // Gradients flow in the storage dtype.
    Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_();
    sum(conv2d(xl, wl, b, p.stride, p.padding, p.dilation, p.groups).to(kFloat32)).backward();
    ASSERT_TRUE(xl.grad().defined() && wl.grad().defined());
    EXPECT_EQ(xl.grad().dtype(), dt);
    Tensor xf = x.to(kFloat32).requires_grad_(), wf = w.to(kFloat32).requires_grad_();
    sum(conv2d(xf, wf, b.defined() ? b.to(kFloat32) : Tensor(), p.stride, p.padding, p.dilation, p.groups))
        .backward();
    expect_near(xl.grad().to(kFloat32), values(xf.grad().to(dt)), 0.0, 0.0);
    expect_near(wl.grad().to(kFloat32), values(wf.grad().to(dt)), 0.0, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Conv2dTest, ::testing::ValuesIn(kConvCases));

TEST(Conv2d, DeterministicAcrossCalls) {
  std::vector<std::vector<double>> runs;
  for (int r = 0; r < 3; ++r) {
    Tensor x = random_tensor({4, 8, 16, 16}, 10).requires_grad_();
    Tensor w = random_tensor({16, 8, 3, 3}, 11).requires_grad_();
    Tensor b = random_tensor({16}, 12).requires_grad_();
    Tensor y = conv2d(x, w, b, 1, 1);
    sum(mul(y, y)).backward();
    std::vector<double> all = values(y);
    for (const Tensor& g : {x.grad(), w.grad(), b.grad()}) {
      const auto v = values(g);
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// oneDNN fixes a primitive's work split for the thread count it was made
// at, so the CPU backend keeps one plan per OpenMP thread count: a plan made
// at one thread would stay single-threaded after omp_set_num_threads(2).
TEST(Conv2d, CpuPlansArePerOpenMpThreadCount) {
  backend::ConvArgs a{};
  a.g = {.n = 2, .c = 3, .h = 8, .w = 8, .k = 4, .kh = 3, .kw = 3, .oh = 8, .ow = 8, .stride_h = 1, .stride_w = 1,
         .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1};
  a.pass = backend::ConvPass::kForward;
  a.dtype = kFloat32;
  const auto plan = backend::kernels_for(kCPU).cnn->plan;
  ASSERT_NE(plan, nullptr);
  const int saved = omp_get_max_threads();
  auto plan_at = [&](int threads) {
    omp_set_num_threads(threads);
    a.plan = -1;
    plan(a);
    return a.plan;
  };
  const int64_t one = plan_at(1), two = plan_at(2);
  omp_set_num_threads(saved);
  EXPECT_GE(one, 0);
  EXPECT_NE(one, two);
  EXPECT_EQ(plan_at(1), one);   // cached, per thread count
  EXPECT_EQ(plan_at(2), two);
  omp_set_num_threads(saved);
}

TEST(Conv2d, RefusesBadArguments) {
  Tensor x = random_tensor({2, 4, 8, 8}, 1);
  expect_error([&] { conv2d(x, random_tensor({3, 3, 3, 3}, 2)); }, kInvalid, {"conv2d", "[2, 4, 8, 8]", "groups"});
  expect_error([&] { conv2d(x, random_tensor({6, 2, 3, 3}, 2), Tensor(), 1, 0, 1, 4); }, kInvalid,
               {"conv2d", "groups = 4"});
  expect_error([&] { conv2d(x.view({8, 8, 8}), random_tensor({3, 4, 3, 3}, 2)); }, kInvalid, {"conv2d", "4-D"});
  expect_error([&] { conv2d(x, random_tensor({3, 4, 9, 9}, 2)); }, kInvalid, {"conv2d", "smaller than the kernel"});
  expect_error([&] { conv2d(x, random_tensor({3, 4, 3, 3}, 2), random_tensor({4}, 3)); }, kInvalid,
               {"conv2d", "bias", "[3]"});
  expect_error([&] { conv2d(x, random_tensor({3, 4, 3, 3}, 2), Tensor(), 0); }, kInvalid, {"conv2d", "stride"});
  // Sizes whose products would wrap int64 (UBSan saw dilation * (k - 1) wrap before the check).
  const int64_t huge = int64_t{1} << 62;
  expect_error([&] { conv2d(x, random_tensor({3, 4, 3, 3}, 2), Tensor(), 1, 1, Size2(huge)); }, kInvalid,
               {"conv2d", "dilation 4611686018427387904", "passes 2^63"});
  expect_error([&] { conv2d(x, random_tensor({3, 4, 3, 3}, 2), Tensor(), 1, Size2(huge)); }, kInvalid,
               {"conv2d", "padding 4611686018427387904", "passes 2^63"});
  expect_error([&] { conv2d(x, random_tensor({3, 4, 3, 3}, 2).to(kBFloat16)); }, kInvalid, {"conv2d"});
  expect_error([&] { conv2d(x.to(kInt32), random_tensor({3, 4, 3, 3}, 2).to(kInt32)); }, kInvalid,
               {"conv2d", "float"});
}

// ---- pooling ----

// Inputs with distinct values at least 0.05 apart: a finite-difference step
// of 1e-2 never changes which element is a window's maximum.
Tensor distinct_tensor(Shape shape, uint64_t seed) {
  const int64_t n = numel_of(shape);
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::shuffle(v.begin(), v.end(), rng);
  for (float& f : v) f = (f - n / 2.f) * 0.05f;
  return from_vector<float>(v, shape);
}

struct PoolCase {
  Shape shape;
  Size2 kernel;
  std::optional<Size2> stride;
  Size2 padding, dilation;
  bool ceil_mode;
};

int64_t pool_out_ref(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * pad - d * (k - 1) - 1) / s;
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

std::vector<double> max_pool_ref(const Tensor& x, const PoolCase& p, int64_t& oh, int64_t& ow) {
  const Size2 st = p.stride.value_or(p.kernel);
  const int64_t h = x.size(-2), w = x.size(-1), planes = x.numel() / (h * w);
  oh = pool_out_ref(h, p.kernel.h, p.padding.h, st.h, p.dilation.h, p.ceil_mode);
  ow = pool_out_ref(w, p.kernel.w, p.padding.w, st.w, p.dilation.w, p.ceil_mode);
  const auto v = values(x);
  std::vector<double> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double m = -INFINITY;
        for (int64_t r = 0; r < p.kernel.h; ++r)
          for (int64_t q = 0; q < p.kernel.w; ++q) {
            const int64_t ih = i * st.h - p.padding.h + r * p.dilation.h, iw = j * st.w - p.padding.w + q * p.dilation.w;
            if (ih >= 0 && ih < h && iw >= 0 && iw < w) m = std::max(m, v[(pl * h + ih) * w + iw]);
          }
        out.push_back(m);
      }
  return out;
}

const PoolCase kPoolCases[] = {
    {{2, 3, 8, 8}, 2, std::nullopt, 0, 1, false},
    {{2, 3, 7, 9}, 3, Size2(2), 1, 1, false},
    {{1, 2, 7, 7}, 3, Size2(2), 1, 1, true},
    {{2, 2, 9, 8}, {3, 2}, Size2(1, 2), {1, 0}, {2, 1}, false},
    {{3, 6, 6}, 2, Size2(1), 0, 1, true},   // 3-D input, overlapping windows
    {{1, 1, 5, 5}, 2, Size2(2), 1, 1, true},
    {{1, 2, 2, 2}, 3, Size2(2), 0, 1, true},   // ceil_mode: one window larger than the input
};

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, MaxPoolMatchesLoopsAndFiniteDifferences) {
  const PoolCase p = GetParam();
  Tensor x = distinct_tensor(p.shape, 1);
  int64_t oh, ow;
  const auto ref = max_pool_ref(x, p, oh, ow);
  Tensor y = max_pool2d(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
  EXPECT_EQ(y.size(-2), oh);
  EXPECT_EQ(y.size(-1), ow);
  expect_near(y, ref, 0.0, 0.0);
  expect_gradients_match(
      [p](const std::vector<Tensor>& t) { return max_pool2d(t[0], p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode); },
      {x});
  Tensor xb = x.to(kBFloat16);
  expect_near(max_pool2d(xb, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode).to(kFloat32),
              values(max_pool2d(xb.to(kFloat32), p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode)), 0.0, 0.0);
}

TEST_P(PoolTest, AvgPoolMatchesLoopsAndFiniteDifferences) {
  const PoolCase p = GetParam();
  if (p.dilation.h != 1 || p.dilation.w != 1) GTEST_SKIP() << "avg_pool2d has no dilation";
  const Size2 st = p.stride.value_or(p.kernel);
  Tensor x = random_tensor(p.shape, 2);
  const int64_t h = x.size(-2), w = x.size(-1), planes = x.numel() / (h * w);
  const int64_t oh = pool_out_ref(h, p.kernel.h, p.padding.h, st.h, 1, p.ceil_mode);
  const int64_t ow = pool_out_ref(w, p.kernel.w, p.padding.w, st.w, 1, p.ceil_mode);
  const auto v = values(x);
  for (bool include_pad : {false, true}) {
    std::vector<double> ref;
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t h0 = i * st.h - p.padding.h, w0 = j * st.w - p.padding.w;
          const int64_t h1 = std::min(h0 + p.kernel.h, h + p.padding.h), w1 = std::min(w0 + p.kernel.w, w + p.padding.w);
          double s = 0;
          int64_t count = 0;
          for (int64_t r = std::max<int64_t>(h0, 0); r < std::min(h1, h); ++r)
            for (int64_t q = std::max<int64_t>(w0, 0); q < std::min(w1, w); ++q) s += v[(pl * h + r) * w + q], ++count;
          ref.push_back(s / (include_pad ? (h1 - h0) * (w1 - w0) : count));
        }
    expect_near(avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil_mode, include_pad), ref, 1e-5, 1e-5);
    expect_gradients_match(
        [p, include_pad](const std::vector<Tensor>& t) {
          return avg_pool2d(t[0], p.kernel, p.stride, p.padding, p.ceil_mode, include_pad);
        },
        {x});
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PoolTest, ::testing::ValuesIn(kPoolCases));

TEST(AdaptiveAvgPool2d, MatchesLoopsAndFiniteDifferences) {
  for (const auto& [shape, out] : {std::pair{Shape{2, 3, 7, 5}, Size2(3, 2)}, std::pair{Shape{1, 2, 4, 4}, Size2(1)},
                                   std::pair{Shape{2, 5, 5}, Size2(7, 3)}, std::pair{Shape{1, 1, 6, 6}, Size2(6)},
                                   // windows of whole rows (the contiguous-run sum): global, and two row bands
                                   std::pair{Shape{2, 3, 37, 29}, Size2(1)}, std::pair{Shape{1, 2, 9, 20}, Size2(2, 1)}}) {
    Tensor x = random_tensor(shape, 3);
    const int64_t h = x.size(-2), w = x.size(-1), planes = x.numel() / (h * w);
    const auto v = values(x);
    std::vector<double> ref;
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t i = 0; i < out.h; ++i)
        for (int64_t j = 0; j < out.w; ++j) {
          const int64_t h0 = (i * h) / out.h, h1 = ((i + 1) * h + out.h - 1) / out.h;
          const int64_t w0 = (j * w) / out.w, w1 = ((j + 1) * w + out.w - 1) / out.w;
          double s = 0;
          for (int64_t r = h0; r < h1; ++r)
            for (int64_t q = w0; q < w1; ++q) s += v[(pl * h + r) * w + q];
          ref.push_back(s / ((h1 - h0) * (w1 - w0)));
        }
    Tensor y = adaptive_avg_pool2d(x, out);
    EXPECT_EQ(y.size(-2), out.h);
    EXPECT_EQ(y.size(-1), out.w);
    expect_near(y, ref, 1e-5, 1e-5);
    expect_gradients_match([out](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], out); }, {x});
  }
}

// Planes wider than the backward's stack tile (4096 floats) are cut into
// column tiles: each element of [1, 1, 2, 5000] lies in three windows of
// width 3 (two at the edges), each dividing by 3 with the padding counted.
TEST(Pooling, AvgPoolBackwardOfAWidePlane) {
  for (DType dt : {kFloat32, kBFloat16}) {
    Tensor x = random_tensor({1, 1, 2, 5000}, 1).to(dt).requires_grad_();
    sum(avg_pool2d(x, {1, 3}, Size2(1), {0, 1}, false, true).to(kFloat32)).backward();
    std::vector<double> expected(10000, 1.0);
    for (int64_t r = 0; r < 2; ++r) expected[r * 5000] = expected[r * 5000 + 4999] = 2.0 / 3.0;
    expect_near(x.grad().to(kFloat32), expected, dt == kFloat32 ? 1e-6 : 1e-2, 0.0);
  }
}

// PyTorch's tie and NaN rules: the first largest tap of a window wins (and
// takes the whole gradient), a NaN wins over numbers and propagates.
TEST(Pooling, MaxPoolTiesGoToTheFirstTapAndNanWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({1, 1, 5, 1, /**/ 2, nan, 3, 4}, {1, 1, 2, 4}).requires_grad_();
  Tensor y = max_pool2d(x, {1, 2});   // windows (1, 1), (5, 1), (2, nan), (3, 4)
  const std::vector<float> got = y.to_vector<float>();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], 1.f);
  EXPECT_EQ(got[1], 5.f);
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_EQ(got[3], 4.f);
  sum(y).backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  const std::vector<float> expected = {1, 0, 1, 0, 0, 1, 0, 1};
  for (size_t k = 0; k < g.size(); ++k) EXPECT_EQ(g[k], expected[k]) << "element " << k;
}

TEST(Pooling, RefusesBadArguments) {
  Tensor x = random_tensor({2, 3, 8, 8}, 1);
  expect_error([&] { max_pool2d(x, 3, Size2(1), 2); }, kInvalid, {"max_pool2d", "padding (2, 2)", "half"});
  expect_error([&] { max_pool2d(x, 0); }, kInvalid, {"max_pool2d", "kernel_size"});
  expect_error([&] { max_pool2d(x, 9); }, kInvalid, {"max_pool2d", "too small"});
  expect_error([&] { avg_pool2d(x.view({48, 8}), 2); }, kInvalid, {"avg_pool2d", "3-D", "[48, 8]"});
  expect_error([&] { adaptive_avg_pool2d(x, 0); }, kInvalid, {"adaptive_avg_pool2d", "output_size"});
  expect_error([&] { max_pool2d(x.to(kInt64), 2); }, kInvalid, {"max_pool2d", "float"});
  const int64_t huge = int64_t{1} << 62;
  expect_error([&] { max_pool2d(x, 3, Size2(1), 0, Size2(huge)); }, kInvalid, {"max_pool2d", "passes 2^63"});
  expect_error([&] { avg_pool2d(x, Size2(huge), Size2(1), Size2(huge)); }, kInvalid, {"avg_pool2d", "passes 2^63"});
  EXPECT_EQ(max_pool2d(x, 2, Size2(huge)).size(-1), 1);   // one window: a huge stride is fine
}

// A kernel far past the input, half of it padding (allowed), is one window
// over the whole plane: it costs the taps inside (before: 2^80 steps, and
// kh kw oh ow wrapped), and its count_include_pad divisor does not wrap.
TEST(Pooling, AHugeKernelPoolsTheTapsInside) {
  const int64_t huge = int64_t{1} << 40;
  Tensor x = random_tensor({2, 3, 4, 5}, 1);
  Tensor m = max_pool2d(x, Size2(huge), std::nullopt, Size2(huge / 2));
  EXPECT_EQ(m.shape(), (Shape{2, 3, 1, 1}));
  expect_near(m, max(max(x, 3, true).first, 2, true).first, 0.0, 0.0);
  Tensor a = avg_pool2d(x, Size2(huge), std::nullopt, Size2(huge / 2), false, /*count_include_pad=*/true);
  expect_near(mul(a, 0x1p80), sum(x, {2, 3}, true));   // the sum over 2^80 taps, padding included
}

// An empty batch may ask for a huge adaptive output: [0, 1, 2^63 - 1, 1] is
// empty and valid, but the CPU kernels sized their work with h w + oh ow,
// past int64 (a signed overflow under ./run sanitize: ops_fuzz).
TEST(Pooling, AnEmptyBatchTakesAHugeAdaptiveOutputSize) {
  Tensor x = zeros({0, 1, 4, 4}).requires_grad_();
  Tensor y = adaptive_avg_pool2d(x, Size2(INT64_MAX, 1));
  EXPECT_EQ(y.shape(), (Shape{0, 1, INT64_MAX, 1}));
  sum(y).backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
}

TEST(Flatten, MergesDimsAsAView) {
  Tensor x = random_tensor({2, 3, 4, 5}, 1);
  Tensor f = flatten(x, 1);
  EXPECT_EQ(f.shape(), (Shape{2, 60}));
  EXPECT_EQ(f.data_ptr(), x.data_ptr());
  EXPECT_EQ(values(f), values(x));
  EXPECT_EQ(flatten(x).shape(), (Shape{120}));
  EXPECT_EQ(flatten(x, 1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(flatten(x, -2, -1).shape(), (Shape{2, 3, 20}));
  EXPECT_EQ(flatten(scalar_tensor(2.0)).shape(), (Shape{1}));
  expect_error([&] { flatten(x, 2, 1); }, kInvalid, {"flatten", "start_dim 2", "end_dim 1"});
  expect_gradients_match([](const std::vector<Tensor>& t) { return mul(flatten(t[0], 1), 2.0); }, {x});
}

// ---- batch norm ----

struct BnRef {
  std::vector<double> y, mean, var;
};

BnRef bn_ref(const Tensor& x, const std::vector<double>& w, const std::vector<double>& b, bool training,
             const std::vector<double>& rm, const std::vector<double>& rv, double eps) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / (n * c);
  const auto v = values(x);
  BnRef r{std::vector<double>(v.size()), std::vector<double>(c), std::vector<double>(c)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (training) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < hw; ++k) mean += v[(i * c + ch) * hw + k];
      mean /= n * hw;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < hw; ++k) var += std::pow(v[(i * c + ch) * hw + k] - mean, 2);
      var /= n * hw;
    } else {
      mean = rm[ch], var = rv[ch];
    }
    r.mean[ch] = mean, r.var[ch] = var;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) {
        const int64_t o = (i * c + ch) * hw + k;
        r.y[o] = (v[o] - mean) / std::sqrt(var + eps) * w[ch] + b[ch];
      }
  }
  return r;
}

TEST(BatchNorm, TrainingAndEvalMatchLoopsWithRunningStatsOverSteps) {
  const int64_t c = 3;
  Tensor rm = zeros({c}), rv = ones({c});
  Tensor w = random_tensor({c}, 1), b = random_tensor({c}, 2);
  std::vector<double> rm_ref(c, 0.0), rv_ref(c, 1.0);
  const double momentum = 0.2, eps = 1e-5;
  for (int step = 0; step < 4; ++step) {
    Tensor x = add(mul(random_tensor({4, c, 3, 5}, 10 + step), 2.0), 0.5);
    const BnRef ref = bn_ref(x, values(w), values(b), true, rm_ref, rv_ref, eps);
    expect_near(batch_norm(x, rm, rv, w, b, true, momentum, eps), ref.y, 1e-5, 1e-5);
    const double m = 4 * 3 * 5;
    for (int64_t ch = 0; ch < c; ++ch) {
      rm_ref[ch] = (1 - momentum) * rm_ref[ch] + momentum * ref.mean[ch];
      rv_ref[ch] = (1 - momentum) * rv_ref[ch] + momentum * ref.var[ch] * m / (m - 1);   // unbiased
    }
    expect_near(rm, rm_ref, 1e-5, 1e-5);
    expect_near(rv, rv_ref, 1e-5, 1e-5);
  }
  Tensor x = random_tensor({2, c, 4, 4}, 20);
  const auto rm_before = values(rm);
  const BnRef ref = bn_ref(x, values(w), values(b), false, rm_ref, rv_ref, eps);
  expect_near(batch_norm(x, rm, rv, w, b, false, momentum, eps), ref.y, 1e-5, 1e-5);
  EXPECT_EQ(values(rm), rm_before);   // eval leaves the running stats alone
  // Without affine parameters or running stats (training), and a 2-D input.
  Tensor x2 = random_tensor({6, c}, 21);
  expect_near(batch_norm(x2, Tensor(), Tensor(), Tensor(), Tensor(), true),
              bn_ref(x2, {1, 1, 1}, {0, 0, 0}, true, {}, {}, 1e-5).y, 1e-5, 1e-5);
}

// momentum = nullopt (PyTorch's momentum=None): the factor is 1 / the count,
// read from num_batches_tracked when the kernel runs, so after k steps the
// running mean is the mean of the k batch means and the running variance
// that of the k unbiased batch variances (the initial 1 weighs nothing).
TEST(BatchNorm, CumulativeAverageMatchesLoopsOverSteps) {
  const int64_t c = 3;
  Tensor rm = zeros({c}), rv = ones({c}), count = zeros({}, kInt64);
  Tensor w = random_tensor({c}, 1), b = random_tensor({c}, 2);
  std::vector<double> rm_ref(c, 0.0), rv_ref(c, 1.0), mean_sum(c, 0.0), var_sum(c, 0.0);
  const double eps = 1e-5, m = 4 * 3 * 5;
  for (int step = 1; step <= 5; ++step) {
    Tensor x = add(mul(random_tensor({4, c, 3, 5}, 30 + step), 1.0 + step), 0.5 * step);
    count.add_(ones({}, kInt64));   // the module counts the batch first, as PyTorch's
    const BnRef ref = bn_ref(x, values(w), values(b), true, rm_ref, rv_ref, eps);
    expect_near(batch_norm(x, rm, rv, w, b, true, std::nullopt, eps, count), ref.y, 1e-5, 1e-5);
    const double f = 1.0 / step;   // PyTorch: exponential_average_factor = 1.0 / float(num_batches_tracked)
    for (int64_t ch = 0; ch < c; ++ch) {
      rm_ref[ch] = (1 - f) * rm_ref[ch] + f * ref.mean[ch];
      rv_ref[ch] = (1 - f) * rv_ref[ch] + f * ref.var[ch] * m / (m - 1);   // unbiased
      mean_sum[ch] += ref.mean[ch];
      var_sum[ch] += ref.var[ch] * m / (m - 1);
    }
    expect_near(rm, rm_ref, 1e-5, 1e-5);
    expect_near(rv, rv_ref, 1e-5, 1e-5);
    std::vector<double> mean_of_means(c), mean_of_vars(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      mean_of_means[ch] = mean_sum[ch] / step;
      mean_of_vars[ch] = var_sum[ch] / step;
    }
    expect_near(rm, mean_of_means, 1e-5, 1e-5);
    expect_near(rv, mean_of_vars, 1e-5, 1e-5);
  }
  EXPECT_EQ(count.item<int64_t>(), 5);   // read, never written, by the op
  // Eval reads neither the count nor a momentum.
  const auto rm_before = values(rm);
  (void)batch_norm(random_tensor({2, c}, 40), rm, rv, w, b, false, std::nullopt, eps, count);
  EXPECT_EQ(values(rm), rm_before);
}

TEST(BatchNorm, BackwardMatchesFiniteDifferences) {
  const int64_t c = 3;
  for (bool training : {true, false}) {
    Tensor rm = random_tensor({c}, 3), rv = add(abs(random_tensor({c}, 4)), 0.5);
    expect_gradients_match(
        [&](const std::vector<Tensor>& t) {
          // Running stats are copied per call so training updates do not drift the function.
          return batch_norm(t[0], rm.clone(), rv.clone(), t[1], t[2], training, 0.1, 1e-5);
        },
        {random_tensor({3, c, 2, 3}, 5), random_tensor({c}, 6), random_tensor({c}, 7)});
  }
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return batch_norm(t[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
      {random_tensor({4, 2, 3}, 8)});
}

// The statistics come from one pass, shifted by each channel's first
// element (NOTE [ Batch norm statistics in one pass ], src/backends/cpu/
// cnn.cpp): a mean 10^6 standard deviations from zero, a first element far
// out in its channel, and a constant channel must keep their variances, and
// a NaN must reach the running variance rather than be clamped away.
TEST(BatchNorm, OnePassStatisticsKeepLargeMeansOutliersAndNaN) {
  const int64_t n = 4, c = 3, hw = 64;
  std::vector<float> v(n * c * hw);
  const std::vector<float> noise = random_tensor({n * c * hw}, 40).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < hw; ++k) {
      const int64_t o = i * c * hw + k;
      v[o] = 1e6f + noise[o];                                       // channel 0: mean 10^6, sd 1
      v[o + hw] = (i == 0 && k == 0) ? 3e3f : noise[o + hw];        // channel 1: first element an outlier
      v[o + 2 * hw] = 7.25f;                                        // channel 2: constant
    }
  }
  const Tensor x = from_vector<float>(v, {n, c, hw});
  const BnRef ref = bn_ref(x, {1, 1, 1}, {0, 0, 0}, true, {}, {}, 1e-5);
  Tensor rm = zeros({c}), rv = zeros({c});
  // y = x scale + shift in f32: near 10^6, an ulp of x is 2^-4, so that is y's resolution there.
  expect_near(batch_norm(x, rm, rv, Tensor(), Tensor(), true, 1.0, 1e-5), ref.y, 0.07, 1e-5);
  const double m = n * hw;
  const std::vector<double> unbiased = {ref.var[0] * m / (m - 1), ref.var[1] * m / (m - 1), 0.0};
  expect_near(rm, ref.mean, 1e-6, 1e-7);
  expect_near(rv, unbiased, 1e-6, 1e-6);
  EXPECT_EQ(rv.to_vector<float>()[2], 0.f);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  Tensor rv_nan = zeros({c});
  batch_norm(from_vector<float>(v, {n, c, hw}), zeros({c}), rv_nan, Tensor(), Tensor(), true);
  EXPECT_TRUE(std::isnan(rv_nan.to_vector<float>()[0]));
  EXPECT_FALSE(std::isnan(rv_nan.to_vector<float>()[1]));
}

// The CPU loops walk blocks of 32 channels with the batch outer (NOTE
// [ Batch norm rows in memory order ], src/backends/cpu/cnn.cpp): 70
// channels make blocks of 32, 32 and 6, and at two threads the blocks start
// where the threads' shares do. Every channel's output, statistics and
// gradients must have the bits of that channel normalized alone, at one
// thread or two.
TEST(BatchNorm, BitsDoNotDependOnChannelBlocksOrThreads) {
  const int64_t n = 8, c = 70;
  const Tensor x = random_tensor({n, c, 15, 15}, 30), g = random_tensor({n, c, 15, 15}, 31);
  const Tensor w0 = random_tensor({c}, 32), b0 = random_tensor({c}, 33);
  struct Out {
    std::vector<float> y, rm, rv, gx, gw, gb;
  };
  const auto run = [&](const Tensor& xs, const Tensor& gs, const Tensor& ws, const Tensor& bs, int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor xi = xs.detach().contiguous().requires_grad_(), w = ws.clone().requires_grad_(),
           b = bs.clone().requires_grad_();
    Tensor rm = zeros({xs.size(1)}), rv = ones({xs.size(1)});
    Tensor y = batch_norm(xi, rm, rv, w, b, true);
    y.backward(gs.contiguous());
    omp_set_num_threads(before);
    return Out{y.contiguous().to_vector<float>(), rm.to_vector<float>(), rv.to_vector<float>(),
               xi.grad().contiguous().to_vector<float>(), w.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  const Out one = run(x, g, w0, b0, 1), two = run(x, g, w0, b0, 2);
  EXPECT_EQ(two.y, one.y);
  EXPECT_EQ(two.rm, one.rm);
  EXPECT_EQ(two.rv, one.rv);
  EXPECT_EQ(two.gx, one.gx);
  EXPECT_EQ(two.gw, one.gw);
  EXPECT_EQ(two.gb, one.gb);
  for (int64_t ch : {0, 31, 32, 33, 63, 64, 69}) {
    SCOPED_TRACE(ch);
    const Out alone = run(x.slice(1, ch, ch + 1), g.slice(1, ch, ch + 1), w0.slice(0, ch, ch + 1),
                          b0.slice(0, ch, ch + 1), 1);
    const auto channel = [&](const std::vector<float>& v) {
      std::vector<float> r;
      for (int64_t i = 0; i < n; ++i) {
        r.insert(r.end(), v.begin() + (i * c + ch) * 225, v.begin() + (i * c + ch + 1) * 225);
      }
      return r;
    };
    EXPECT_EQ(alone.y, channel(one.y));
    EXPECT_EQ(alone.gx, channel(one.gx));
    EXPECT_EQ(alone.rm[0], one.rm[ch]);
    EXPECT_EQ(alone.rv[0], one.rv[ch]);
    EXPECT_EQ(alone.gw[0], one.gw[ch]);
    EXPECT_EQ(alone.gb[0], one.gb[ch]);
  }
}

TEST(BatchNorm, HalfDtypesMatchF32) {
  for (DType dt : {kBFloat16, kFloat16}) {
    Tensor x = random_tensor({4, 3, 5, 5}, 1).to(dt), w = random_tensor({3}, 2).to(dt), b = random_tensor({3}, 3).to(dt);
    Tensor rm = zeros({3}, dt), rv = ones({3}, dt);
    Tensor y = batch_norm(x, rm, rv, w, b, true);
    EXPECT_EQ(y.dtype(), dt);
    Tensor rm32 = zeros({3}), rv32 = ones({3});
    Tensor y32 = batch_norm(x.to(kFloat32), rm32, rv32, w.to(kFloat32), b.to(kFloat32), true);
    expect_near(y.to(kFloat32), values(y32), 2e-2, 2e-2);
    expect_near(rm.to(kFloat32), values(rm32), 1e-2, 1e-2);
    expect_near(rv.to(kFloat32), values(rv32), 1e-2, 1e-2);
  }
}

TEST(BatchNorm, RefusesBadArguments) {
  Tensor x = random_tensor({2, 3, 4, 4}, 1);
  expect_error([&] { batch_norm(x, Tensor(), Tensor()); }, kInvalid, {"batch_norm", "eval", "running_mean"});
  expect_error([&] { batch_norm(x, zeros({4}), ones({4}), Tensor(), Tensor(), true); }, kInvalid,
               {"batch_norm", "running_mean", "[4]", "[3]"});
  expect_error([&] { batch_norm(x, zeros({3}), Tensor(), Tensor(), Tensor(), true); }, kInvalid,
               {"batch_norm", "together"});
  expect_error([&] { batch_norm(random_tensor({1, 3}, 2), Tensor(), Tensor(), Tensor(), Tensor(), true); }, kInvalid,
               {"batch_norm", "more than 1 value per channel"});
  expect_error([&] { batch_norm(random_tensor({3}, 2), Tensor(), Tensor(), Tensor(), Tensor(), true); }, kInvalid,
               {"batch_norm", "(N, C, ...)"});
  expect_error([&] { batch_norm(x, zeros({3}, kBFloat16), ones({3}, kBFloat16), Tensor(), Tensor(), true); },
               kInvalid, {"batch_norm"});
  for (double eps : {-1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    expect_error([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, eps); }, kInvalid,
                 {"batch_norm", "eps must be finite and non-negative"});
  }
  Tensor rm = zeros({3}), rv = ones({3});
  expect_error([&] { batch_norm(x, rm, rv, Tensor(), Tensor(), true, std::nan("")); }, kInvalid,
               {"batch_norm", "momentum must be finite"});
  EXPECT_EQ(values(rm), std::vector<double>(3, 0.0));   // refused before any update
  // A cumulative average needs the count, of the right kind, and only then.
  Tensor count = ones({}, kInt64);
  expect_error([&] { batch_norm(x, rm, rv, Tensor(), Tensor(), true, std::nullopt); }, kInvalid,
               {"batch_norm", "nullopt", "num_batches_tracked"});
  expect_error([&] { batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5, count); }, kInvalid,
               {"batch_norm", "num_batches_tracked", "momentum 0.1"});
  for (const Tensor& bad : {ones({}), ones({1}, kInt64)}) {
    expect_error([&] { batch_norm(x, rm, rv, Tensor(), Tensor(), true, std::nullopt, 1e-5, bad); }, kInvalid,
                 {"batch_norm", "num_batches_tracked must be a 0-d i64 tensor"});
  }
  EXPECT_EQ(values(rm), std::vector<double>(3, 0.0));
}

}  // namespace
}  // namespace encore
