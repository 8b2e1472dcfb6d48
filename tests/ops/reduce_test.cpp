// Reductions (sum, mean, var, max, argmax, sum_to) against plain-loop host
// references in double, over shapes, dim sets, keepdim, strided inputs and
// dtypes; every backward against finite differences; every error path.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/strings/match.h"
#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::random_tensor;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- host reference ----

// Where each input element (row-major) lands: its output element and its
// row-major index within the reduced dims.
struct RefLayout {
  Shape out_shape;
  int64_t out_numel = 1;
  int64_t count = 1;                 // input elements per output element
  std::vector<int64_t> out_of, red_of;
};

RefLayout ref_layout(const Shape& shape, std::vector<int64_t> dims, bool keepdim) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(nd, dims.empty());
  for (int64_t d : dims) {
    if (nd > 0) reduced[d < 0 ? d + nd : d] = true;
  }
  RefLayout l;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      l.count *= shape[d];
      if (keepdim) l.out_shape.push_back(1);
    } else {
      l.out_numel *= shape[d];
      l.out_shape.push_back(shape[d]);
    }
  }
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    const std::vector<int64_t> idx = testing::unravel(i, shape);
    int64_t o = 0, r = 0;
    for (int64_t d = 0; d < nd; ++d) {
      if (reduced[d]) r = r * shape[d] + idx[d];
      else o = o * shape[d] + idx[d];
    }
    l.out_of.push_back(o);
    l.red_of.push_back(r);
  }
  return l;
}

std::vector<double> ref_sum(const std::vector<double>& x, const RefLayout& l) {
  std::vector<double> out(l.out_numel, 0.0);
  for (size_t i = 0; i < x.size(); ++i) out[l.out_of[i]] += x[i];
  return out;
}

double max_abs_sum(const std::vector<double>& x, const RefLayout& l) {
  std::vector<double> out(l.out_numel, 0.0);
  for (size_t i = 0; i < x.size(); ++i) out[l.out_of[i]] += std::abs(x[i]);
  double m = 0;
  for (double v : out) m = std::max(m, v);
  return m;
}

std::vector<double> ref_mean(const std::vector<double>& x, const RefLayout& l) {
  std::vector<double> out = ref_sum(x, l);
  for (double& v : out) v /= static_cast<double>(l.count);   // 0 / 0 = NaN for an empty reduction
  return out;
}

std::vector<double> ref_var(const std::vector<double>& x, const RefLayout& l, int64_t correction) {
  const std::vector<double> m = ref_mean(x, l);
  std::vector<double> out(l.out_numel, 0.0);
  for (size_t i = 0; i < x.size(); ++i) out[l.out_of[i]] += (x[i] - m[l.out_of[i]]) * (x[i] - m[l.out_of[i]]);
  const double divisor = std::max<double>(0.0, static_cast<double>(l.count - correction));
  for (double& v : out) v = l.count == 0 ? kNaN : v / divisor;
  return out;
}

// Values and first indices of the maximum, a NaN counting as the maximum.
std::pair<std::vector<double>, std::vector<int64_t>> ref_max(const std::vector<double>& x, const RefLayout& l) {
  std::vector<double> best(l.out_numel, 0.0);
  std::vector<int64_t> index(l.out_numel, -1);
  for (size_t i = 0; i < x.size(); ++i) {   // row-major: within an output, reduced indices ascend
    const int64_t o = l.out_of[i];
    const bool better = index[o] < 0 || (!std::isnan(best[o]) && (std::isnan(x[i]) || x[i] > best[o]));
    if (better) {
      best[o] = x[i];
      index[o] = l.red_of[i];
    }
  }
  return {best, index};
}

// Like expect_near, and an expected inf must be matched exactly (expect_near
// computes inf - inf, which fails).
void expect_near_or_inf(const Tensor& actual, const std::vector<double>& expected) {
  const std::vector<double> a = values(actual);
  ASSERT_EQ(a.size(), expected.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(expected[i])) {
      EXPECT_EQ(a[i], expected[i]) << "element " << i;
    } else if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << "element " << i << " is " << a[i];
    } else {
      EXPECT_NEAR(a[i], expected[i], 1e-6) << "element " << i;
    }
  }
}

// The same values in other layouts: transposed, and a stepped slice of a larger buffer.
std::vector<Tensor> layouts(const Tensor& a) {
  std::vector<Tensor> out = {a, testing::non_contiguous(a)};
  if (a.dim() >= 1) {
    Shape big = a.shape();
    big.back() = big.back() * 2 + 1;
    Tensor s = zeros(big, a.dtype()).slice(-1, 1, big.back(), 2);
    s.copy_(a);
    out.push_back(s);
  }
  return out;
}

// Integer-valued floats in [-2, 2]: many ties.
Tensor tied_tensor(const Shape& shape, int64_t seed) {
  std::vector<float> v(numel_of(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919 + seed * 31 + i / 3) % 5) - 2.0f;
  return from_vector<float>(v, {static_cast<int64_t>(v.size())}).reshape(shape);   // shape {} is 0-d here
}

// Distinct values 0.1 apart (a permutation), so finite differences never cross a tie.
Tensor distinct_tensor(const Shape& shape) {
  const int64_t n = numel_of(shape);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.1f * static_cast<float>((i * 37) % n) - 0.05f * static_cast<float>(n);
  return from_vector<float>(v, {n}).reshape(shape);
}

struct DimsCase {
  Shape shape;
  std::vector<int64_t> dims;
};

std::string case_name(const DimsCase& c, bool keepdim) {
  return shape_str(c.shape) + " dims " + shape_str(c.dims) + (keepdim ? " keepdim" : "");
}

// Shapes and dim sets covering rows (last dim), columns (leading dims),
// middle dims, several dims, all dims, negative and unordered dims, size-0
// and size-1 dims, 0-d inputs, and long reductions (pairwise tree, column
// folds and blocks, full-reduction blocks).
const std::vector<DimsCase>& dims_cases() {
  static const std::vector<DimsCase> cases = {
      {{2, 3, 4}, {}},     {{2, 3, 4}, {0}},     {{2, 3, 4}, {1}},      {{2, 3, 4}, {2}},
      {{2, 3, 4}, {-1}},   {{2, 3, 4}, {0, 2}},  {{2, 3, 4}, {2, -3}},  {{2, 3, 4}, {1, 2}},
      {{2, 3, 4}, {0, 1}}, {{5}, {0}},           {{}, {}},              {{}, {0}},
      {{}, {-1}},          {{1, 3, 1}, {0}},     {{1, 3, 1}, {2}},      {{3, 1, 4}, {1}},
      {{0, 3}, {0}},       {{0, 3}, {1}},        {{0, 3}, {}},          {{2, 0, 3}, {1}},
      {{4, 5, 6, 7}, {1, 3}}, {{3, 1000}, {1}},  {{600, 5}, {0}},       {{40, 300}, {0}},
      {{70000}, {}},       {{2, 3, 5, 7}, {0, 2, 3}}, {{7, 5, 300}, {0, 1}}, {{3, 2100}, {0}},
      {{9, 1030}, {-2}},
  };
  return cases;
}

// ---- sum ----

TEST(ReduceTest, SumMatchesReferenceOverShapesDimsAndLayouts) {
  uint64_t seed = 1;
  for (const DimsCase& c : dims_cases()) {
    const Tensor a = random_tensor(c.shape, seed++);
    for (bool keepdim : {false, true}) {
      const RefLayout l = ref_layout(c.shape, c.dims, keepdim);
      const std::vector<double> x = values(a);
      const std::vector<double> expected = ref_sum(x, l);
      const double atol = 1e-5 + 2e-6 * max_abs_sum(x, l);   // see NOTE [ Summation error ] in reduce.cpp
      for (const Tensor& in : layouts(a)) {
        SCOPED_TRACE(case_name(c, keepdim) + " strides " + shape_str(in.strides()));
        Tensor out = sum(in, c.dims, keepdim);
        EXPECT_EQ(out.shape(), l.out_shape);
        EXPECT_EQ(out.dtype(), kFloat32);
        expect_near(out, expected, atol, 1e-5);
      }
    }
  }
}

// NOTE [ Summation error ]'s order as a plain float loop: a run of n
// elements splits in halves (multiples of 8) down to 256, each block summed
// by 8 lanes, combined ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
// then its tail; kSqDev maps x to (x - mean)^2 first.
float pairwise_model(const float* x, int64_t n, int64_t stride, bool sq_dev = false, float mean = 0) {
  if (n > 256) {
    const int64_t half = n / 2 / 8 * 8;
    return pairwise_model(x, half, stride, sq_dev, mean) + pairwise_model(x + half * stride, n - half, stride, sq_dev, mean);
  }
  auto map = [&](float v) { return sq_dev ? (v - mean) * (v - mean) : v; };
  float lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += map(x[(i + j) * stride]);
  }
  float tail = 0;
  for (; i < n; ++i) tail += map(x[i * stride]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

std::vector<uint32_t> float_bits(const Tensor& t) {
  const std::vector<float> v = t.contiguous().to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}
uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The vectorized f32 row sums (a clone per x86-64 level) give the bits of
// the plain loop above, for row lengths around the lane and block sizes,
// dense rows and rows of stride 2; mean and var (squared deviations from the
// f32 mean, divided in double) too; all of it at one and two threads.
TEST(ReduceTest, RowSumsMeanAndVarAreThePairwiseLaneOrderBitForBit) {
  for (int64_t n : {1, 7, 8, 9, 31, 64, 100, 256, 257, 1000, 4099}) {
    const int64_t rows = 5;
    const Tensor wide = random_tensor({rows, 2 * n}, static_cast<uint64_t>(n));
    for (bool strided : {false, true}) {
      const Tensor a = strided ? wide.slice(1, 0, 2 * n, 2) : wide.slice(1, 0, n).contiguous();
      const std::vector<float> buf = (strided ? wide : a).to_vector<float>();
      const int64_t row_pitch = strided ? 2 * n : n, step = strided ? 2 : 1;
      std::vector<uint32_t> want_sum, want_mean, want_var;
      for (int64_t r = 0; r < rows; ++r) {
        const float* x = buf.data() + r * row_pitch;
        const float s = pairwise_model(x, n, step);
        const float m = static_cast<float>(static_cast<double>(s) / static_cast<double>(n));
        const float ss = pairwise_model(x, n, step, true, m);
        want_sum.push_back(float_bits(s));
        want_mean.push_back(float_bits(m));
        want_var.push_back(float_bits(n > 1 ? static_cast<float>(static_cast<double>(ss) / static_cast<double>(n - 1))
                                            : std::numeric_limits<float>::quiet_NaN()));
      }
      for (int threads : {1, 2}) {
        SCOPED_TRACE("n " + std::to_string(n) + (strided ? " stride 2" : "") + ", " + std::to_string(threads) + " threads");
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        EXPECT_EQ(float_bits(sum(a, {1})), want_sum);
        EXPECT_EQ(float_bits(mean(a, {1})), want_mean);
        if (n > 1) {
          EXPECT_EQ(float_bits(var(a, {1})), want_var);
        }
        omp_set_num_threads(before);
      }
    }
  }
}

// A full reduction cuts its range into blocks by its size alone (70,000
// elements: 2 blocks), sums each in the pairwise order and merges the
// partials in block order (Kahan): the plain model's bits at 1 and 2 threads;
// column sums (lanes across adjacent outputs) do not depend on threads either.
TEST(ReduceTest, FullAndColumnSumsGiveTheSameBitsAtOneAndTwoThreads) {
  const int64_t n = 70000;
  const Tensor a = random_tensor({n}, 99);
  const std::vector<float> x = a.to_vector<float>();
  const float p0 = pairwise_model(x.data(), n / 2, 1), p1 = pairwise_model(x.data() + n / 2, n - n / 2, 1);
  const float t = p0 + p1;
  const float comp = (t - p0) - p1;
  const float want = t - comp;
  const Tensor cols = random_tensor({3000, 1100}, 98);
  std::vector<uint32_t> col_bits[2], var_bits[2];
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    EXPECT_EQ(float_bits(sum(a).item<float>()), float_bits(want));
    col_bits[threads - 1] = float_bits(sum(cols, {0}));
    var_bits[threads - 1] = float_bits(var(cols, {0}));
    omp_set_num_threads(before);
  }
  EXPECT_EQ(col_bits[0], col_bits[1]);
  EXPECT_EQ(var_bits[0], var_bits[1]);
}

TEST(ReduceTest, SumOfIntegersAndBoolAccumulatesInInt64) {
  // 2e9 fits in i32; three of them do not.
  Tensor a = from_vector<int32_t>({2000000000, 2000000000, 2000000000, -7, 5, 1}, {2, 3});
  Tensor s = sum(a, {1});
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{6000000000, -1}));
  EXPECT_EQ(sum(a).item<int64_t>(), 5999999999);
  Tensor b = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(b.t(), {1}).to_vector<int64_t>(), (std::vector<int64_t>{5, 7, 9}));   // strided columns
  EXPECT_EQ(sum(b, {0}, true).to_vector<int64_t>(), (std::vector<int64_t>{5, 7, 9}));
  Tensor m = from_vector<bool>({true, false, true, true, true, false}, {3, 2});
  EXPECT_EQ(sum(m, {0}).dtype(), kInt64);
  EXPECT_EQ(sum(m, {0}).to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(sum(zeros({0, 4}, kInt32), {0}).to_vector<int64_t>(), (std::vector<int64_t>(4, 0)));
  // A long integer column reduction (column loop folds) against the closed form.
  Tensor r = arange(0, 1000 * 3).reshape({1000, 3});
  std::vector<int64_t> cols = sum(r, {0}).to_vector<int64_t>();
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(cols[c], 3 * (999 * 1000 / 2) + 1000 * c);
}

TEST(ReduceTest, SumOfEmptyIsZeroAndOfSizeOneDimIsTheInput) {
  expect_near(sum(zeros({3, 0}), {1}), {0, 0, 0});
  expect_near(sum(zeros({0})), {0});
  EXPECT_EQ(sum(zeros({0})).dim(), 0);
  EXPECT_EQ(sum(zeros({0, 3}), {1}).shape(), Shape({0}));
  Tensor a = random_tensor({4, 1, 3}, 9);
  expect_near(sum(a, {1}), values(a));
  expect_near(sum(random_tensor({}, 10).reshape({}), {0}), values(random_tensor({}, 10)));
}

// ---- mean, var ----

TEST(ReduceTest, MeanAndVarMatchReference) {
  uint64_t seed = 100;
  for (const DimsCase& c : dims_cases()) {
    const Tensor a = random_tensor(c.shape, seed++);
    const std::vector<double> x = values(a);
    for (bool keepdim : {false, true}) {
      const RefLayout l = ref_layout(c.shape, c.dims, keepdim);
      for (const Tensor& in : layouts(a)) {
        SCOPED_TRACE(case_name(c, keepdim) + " strides " + shape_str(in.strides()));
        Tensor m = mean(in, c.dims, keepdim);
        EXPECT_EQ(m.shape(), l.out_shape);
        expect_near(m, ref_mean(x, l), 1e-5, 1e-5);
        for (int64_t correction : {0, 1}) {
          Tensor v = var(in, c.dims, correction, keepdim);
          EXPECT_EQ(v.shape(), l.out_shape);
          expect_near(v, ref_var(x, l, correction), 1e-5, 1e-4);
        }
      }
    }
  }
}

TEST(ReduceTest, VarIsAccurateForLargeOffsets) {
  // Two passes: a large mean does not swamp the spread (a one-pass E[x^2] - E[x]^2 would).
  Tensor a = add(random_tensor({4, 5000}, 7), 1000.0);
  const RefLayout l = ref_layout({4, 5000}, {1}, false);
  expect_near(var(a, {1}), ref_var(values(a), l, 1), 1e-3, 1e-3);
}

// An empty input whose other dims are huge: reducing the empty dim leaves
// an output too large to allocate, refused (var sized its mean buffer with
// a wrapped count first, a signed overflow: ops_fuzz, before such shapes
// were held to NOTE [ Shapes whose nonzero dims fit ], which refuses
// [0, 2^62, 4] itself); reducing the others gives an empty output.
TEST(ReduceTest, EmptyInputsWithHugeDimsAreRefusedOrEmpty) {
  const int64_t k2to61 = int64_t{1} << 61, k2to62 = int64_t{1} << 62;
  expect_error([&] { (void)zeros({0, 1, 1}).expand({0, k2to62, 4}); }, absl::StatusCode::kInvalidArgument,
               {"expand", "2^63"});
  const Tensor e = zeros({0, 1, 1}).expand({0, k2to61, 3});
  for (const auto& reduce : {std::function<Tensor()>([&] { return var(e, {0}); }),
                             std::function<Tensor()>([&] { return sum(e, {0}, true); })}) {
    const absl::Status s = status_of([&] { (void)reduce(); });
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "2^63 bytes")) << s;
  }
  EXPECT_EQ(var(e, {1, 2}).shape(), (Shape{0}));
  EXPECT_EQ(mean(e, {1, 2}, true).shape(), (Shape{0, 1, 1}));
}

TEST(ReduceTest, EmptyAndOverCorrectedReductionsFollowPyTorch) {
  // mean and var of nothing: NaN.
  expect_near(mean(zeros({2, 0}), {1}), {kNaN, kNaN});
  expect_near(var(zeros({0})), {kNaN});
  // A single element with correction 1: 0 / 0.
  expect_near(var(from_vector<float>({3}), {}, 1), {kNaN});
  expect_near(var(scalar_tensor(3.0), {}, 1), {kNaN});
  expect_near(var(scalar_tensor(3.0), {}, 0), {0});
  // correction >= count with a spread: a positive sum over a zero divisor.
  Tensor a = from_vector<float>({1, 2, 1, 1}, {2, 2});
  expect_near_or_inf(var(a, {1}, 2), {kInf, kNaN});
  expect_near_or_inf(var(a, {1}, 5), {kInf, kNaN});
  // Corrections at the ends of int64 (ops_fuzz found count - correction
  // overflowing in var's backward): the divisor is taken in double.
  for (int64_t c : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    Tensor x = from_vector<float>({1, 2, 4}, {3}).requires_grad_(true);
    Tensor v = var(x, {}, c);
    v.backward();
    const double divisor = std::max(0.0, 3.0 - static_cast<double>(c));
    expect_near_or_inf(v, {divisor > 0 ? (14.0 / 3.0) / divisor : kInf});
    EXPECT_EQ(x.grad().numel(), 3) << c;
  }
  // A sum reaching inf stays inf (the Kahan compensation does not turn it into NaN).
  const float big = std::numeric_limits<float>::max();
  expect_near_or_inf(sum(from_vector<float>(std::vector<float>(600, big))), {kInf});
  expect_near_or_inf(sum(from_vector<float>({1, static_cast<float>(kInf), 2, -3})), {kInf});
  expect_near_or_inf(sum(from_vector<float>({1, static_cast<float>(kInf), -static_cast<float>(kInf)})), {kNaN});
  expect_near(var(a, {1}, 0), {0.25, 0});
}

TEST(ReduceTest, HalfPrecisionMatchesFloat) {
  // Same (already rounded) values reduced in f16/bf16 and in f32. The
  // accumulation is f32 in both, so the difference is the final rounding of
  // the result: 2^-11 relative for f16, 2^-8 for bf16 (rtol 1e-3 and 8e-3).
  for (DType dt : {kFloat16, kBFloat16}) {
    const double rtol = dt == kFloat16 ? 1e-3 : 8e-3;
    uint64_t seed = 300;
    for (const DimsCase& c : dims_cases()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + case_name(c, false));
      Tensor a = random_tensor(c.shape, seed++, dt);
      Tensor ref = a.to(kFloat32);
      Tensor s = sum(a, c.dims);
      EXPECT_EQ(s.dtype(), dt);
      const RefLayout l = ref_layout(c.shape, c.dims, false);
      const double atol = 1e-3 + rtol * 1e-3 * max_abs_sum(values(ref), l);
      expect_near(s, sum(ref, c.dims), atol, rtol);
      expect_near(mean(a, c.dims), mean(ref, c.dims), 1e-3, rtol);
      expect_near(var(a, c.dims), var(ref, c.dims), 1e-3, rtol);
      if (a.numel() > 0) {
        auto [v16, i16] = max(a.dim() == 0 ? a : a.reshape({-1}), 0);
        auto [v32, i32] = max(ref.dim() == 0 ? ref : ref.reshape({-1}), 0);
        expect_near(v16, values(v32), 0, 0);   // max is exact
        EXPECT_EQ(i16.item<int64_t>(), i32.item<int64_t>());
      }
    }
  }
}

// ---- max, argmax ----

TEST(ReduceTest, MaxAndArgmaxMatchReferenceWithFirstIndexTies) {
  const std::vector<DimsCase> cases = {
      {{2, 3, 4}, {0}}, {{2, 3, 4}, {1}}, {{2, 3, 4}, {2}}, {{2, 3, 4}, {-1}}, {{2, 3, 4}, {-3}},
      {{7}, {0}},       {{}, {0}},        {{1, 5}, {0}},    {{5, 1}, {1}},     {{0, 3}, {1}},
      {{600, 5}, {0}},  {{40, 300}, {0}}, {{3, 1000}, {1}}, {{300, 2}, {1}},  {{9, 1030}, {0}},
  };
  int64_t seed = 0;
  for (const DimsCase& c : cases) {
    const Tensor a = tied_tensor(c.shape, seed++);
    const std::vector<double> x = values(a);
    for (bool keepdim : {false, true}) {
      const RefLayout l = ref_layout(c.shape, c.dims, keepdim);
      auto [best, index] = ref_max(x, l);
      for (const Tensor& in : layouts(a)) {
        SCOPED_TRACE(case_name(c, keepdim) + " strides " + shape_str(in.strides()));
        auto [v, i] = max(in, c.dims[0], keepdim);
        EXPECT_EQ(v.shape(), l.out_shape);
        EXPECT_EQ(i.shape(), l.out_shape);
        EXPECT_EQ(i.dtype(), kInt64);
        expect_near(v, best, 0, 0);
        EXPECT_EQ(i.to_vector<int64_t>(), index);
        EXPECT_EQ(argmax(in, c.dims[0], keepdim).to_vector<int64_t>(), index);
        // Integer dtypes take the same path.
        EXPECT_EQ(max(in.to(kInt32), c.dims[0], keepdim).second.to_vector<int64_t>(), index);
      }
    }
  }
}

TEST(ReduceTest, MaxPropagatesTheFirstNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = from_vector<float>({1, nan, 5, nan, 2, 3, 9, 9, -1, 4, nan, 8}, {3, 4});
  auto [v, i] = max(a, 1);
  expect_near(v, {kNaN, 9, kNaN});
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 2}));
  auto [vc, ic] = max(a, 0);   // columns
  expect_near(vc, {2, kNaN, kNaN, kNaN});
  EXPECT_EQ(ic.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 2, 0}));
  expect_near(max(a), {kNaN});
  // Long contiguous rows (the vectorized row scan): first NaN, all -inf, ties.
  Tensor rows = zeros({3, 100});
  rows.select(0, 0).slice(0, 10, 11).fill_(5.0);
  rows.select(0, 0).slice(0, 37, 38).fill_(nan);
  rows.select(0, 0).slice(0, 50, 51).fill_(nan);
  rows.select(0, 1).fill_(-kInf);
  rows.select(0, 2).slice(0, 20, 21).fill_(3.0);
  rows.select(0, 2).slice(0, 90, 91).fill_(3.0);
  auto [vr, ir] = max(rows, 1);
  expect_near_or_inf(vr, {kNaN, -kInf, 3});
  EXPECT_EQ(ir.to_vector<int64_t>(), (std::vector<int64_t>{37, 0, 20}));
  // The first NaN of a long full reduction, past several blocks.
  Tensor big = zeros({100000});
  big.slice(0, 40001, 40002).fill_(nan);
  big.slice(0, 90000, 90001).fill_(nan);
  big.slice(0, 5, 6).fill_(100.0);
  EXPECT_EQ(argmax(big, 0).item<int64_t>(), 40001);
  EXPECT_TRUE(std::isnan(max(big).item<float>()));
}

// The vectorized f32 row argmax (four accumulators, a vector scan) for every
// row length up to 80 and every position of the maximum, with an equal value
// later in the row, and of a NaN after an earlier maximum.
TEST(ReduceTest, RowArgmaxFindsTheFirstMaximumAndTheFirstNaNAtEveryPosition) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n = 1; n <= 80; ++n) {
    for (int64_t p = 0; p < n; ++p) {
      std::vector<float> v(n), w(n);
      for (int64_t i = 0; i < n; ++i) v[i] = w[i] = static_cast<float>((i * 13) % 7) - 10.0f;
      v[p] = 5.0f;
      if (p + 3 < n) v[p + 3] = 5.0f;   // a tie later: the first index wins
      w[n - 1 - p] = 7.0f;
      w[p] = nan;
      if (p + 2 < n) w[p + 2] = nan;
      SCOPED_TRACE("n " + std::to_string(n) + " position " + std::to_string(p));
      auto [mv, mi] = max(from_vector<float>(v, {1, n}), 1);
      EXPECT_EQ(mi.item<int64_t>(), p);
      EXPECT_EQ(mv.item<float>(), 5.0f);
      auto [nv, ni] = max(from_vector<float>(w, {1, n}), 1);
      EXPECT_EQ(ni.item<int64_t>(), p);
      EXPECT_TRUE(std::isnan(nv.item<float>()));
    }
  }
  // All equal, and all -inf: index 0.
  EXPECT_EQ(argmax(full({1, 77}, 2.0), 1).item<int64_t>(), 0);
  EXPECT_EQ(argmax(full({1, 77}, -kInf), 1).item<int64_t>(), 0);
}

// The f32 column max (adjacent outputs as vector lanes, max_column_step):
// per column the maximum, a tie after it and, in every third column, NaNs,
// at positions that cover every row; against the reference, values and
// first indices; 1100 columns span two column blocks.
TEST(ReduceTest, ColumnMaxFindsTheFirstMaximumAndTheFirstNaNInEveryColumn) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t rows : {1, 2, 5, 33, 300}) {
    const int64_t cols = 1100;
    std::vector<float> v(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = static_cast<float>((r * 5 + c) % 9) - 20.0f;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t p = (c * 7) % rows;
      v[p * cols + c] = 3.0f;
      if (p + 2 < rows) v[(p + 2) * cols + c] = 3.0f;   // a later tie
      if (c % 3 == 0 && p + 1 < rows) {
        v[(p + 1) * cols + c] = nan;
        if (p + 3 < rows) v[(p + 3) * cols + c] = nan;
      }
    }
    const Tensor a = from_vector<float>(v, {rows, cols});
    const RefLayout l = ref_layout({rows, cols}, {0}, false);
    std::vector<double> x(v.begin(), v.end());
    auto [best, index] = ref_max(x, l);
    SCOPED_TRACE(std::to_string(rows) + " rows");
    auto [mv, mi] = max(a, 0);
    EXPECT_EQ(mi.to_vector<int64_t>(), index);
    const std::vector<double> got = values(mv);
    for (int64_t c = 0; c < cols; ++c) {
      if (std::isnan(best[c])) {
        EXPECT_TRUE(std::isnan(got[c])) << "column " << c;
      } else {
        EXPECT_EQ(got[c], best[c]) << "column " << c;
      }
    }
  }
}

TEST(ReduceTest, MaxOverAllElementsMatchesReference) {
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{5}, Shape{3, 4}, Shape{2, 3, 4}, Shape{70000}}) {
    const Tensor a = random_tensor(shape, 17);
    const std::vector<double> x = values(a);
    const RefLayout l = ref_layout(shape, {}, false);
    for (const Tensor& in : layouts(a)) {
      SCOPED_TRACE(shape_str(shape) + " strides " + shape_str(in.strides()));
      Tensor m = max(in);
      EXPECT_EQ(m.dim(), 0);
      expect_near(m, ref_max(x, l).first, 0, 0);
    }
  }
  EXPECT_EQ(max(from_vector<int64_t>({3, -9, 12, 12, 0}, {5})).item<int64_t>(), 12);
}

// ---- sum_to ----

TEST(ReduceTest, SumToInvertsBroadcasting) {
  const Shape in_shape = {2, 3, 4};
  const Tensor a = random_tensor(in_shape, 21);
  const std::vector<double> x = values(a);
  for (const Shape& target : {Shape{3, 4}, Shape{1, 4}, Shape{2, 1, 4}, Shape{}, Shape{1}, Shape{4},
                              Shape{1, 1, 1}, Shape{2, 3, 1}, Shape{3, 1}}) {
    // The reference: every input element adds into its broadcast position in target.
    std::vector<double> expected(numel_of(target), 0.0);
    for (int64_t i = 0; i < a.numel(); ++i) {
      expected[testing::broadcast_index(testing::unravel(i, in_shape), target)] += x[i];
    }
    for (const Tensor& in : layouts(a)) {
      SCOPED_TRACE(shape_str(target) + " strides " + shape_str(in.strides()));
      Tensor out = sum_to(in, target);
      EXPECT_EQ(out.shape(), target);
      expect_near(out, expected, 1e-5, 1e-5);
    }
  }
  // Equal shapes: the input itself; only size-1 dims to drop: a view of it.
  EXPECT_TRUE(sum_to(a, in_shape).is_same(a));
  Tensor ones_lead = random_tensor({1, 3, 1, 4}, 22);
  Tensor viewed = sum_to(ones_lead, Shape{3, 1, 4});
  EXPECT_EQ(viewed.storage(), ones_lead.storage());
  expect_near(viewed, values(ones_lead));
  // Integer tensors keep their dtype.
  Tensor b = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum_to(b, Shape{1, 3}).dtype(), kInt32);
  EXPECT_EQ(sum_to(b, Shape{1, 3}).to_vector<int32_t>(), (std::vector<int32_t>{5, 7, 9}));
  // A dim of size 0 summed to size 1.
  expect_near(sum_to(zeros({0, 3}), Shape{1, 3}), {0, 0, 0});
}

TEST(ReduceTest, BiasGradientThroughBroadcastAdd) {
  // add's backward sums the gradient to the bias shape [N] with sum_to (the column loop).
  Tensor x = random_tensor({513, 300}, 31);
  Tensor b = random_tensor({300}, 32).requires_grad_();
  Tensor g = random_tensor({513, 300}, 33);
  add(x, b).backward(g);
  const RefLayout l = ref_layout({513, 300}, {0}, false);
  const std::vector<double> gv = values(g);
  expect_near(b.grad(), ref_sum(gv, l), 1e-5 + 2e-6 * max_abs_sum(gv, l), 1e-5);
}

// ---- backward ----

TEST(ReduceTest, SumAndMeanGradientsMatchFiniteDifferences) {
  const Tensor a = random_tensor({2, 3, 4}, 41);
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, {1}, {0, 2}, {-1}}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(shape_str(dims) + (keepdim ? " keepdim" : ""));
      expect_gradients_match([&](const auto& in) { return sum(in[0], dims, keepdim); }, {a});
      expect_gradients_match([&](const auto& in) { return mean(in[0], dims, keepdim); }, {a});
    }
  }
  // A strided input and a 0-d one.
  expect_gradients_match([](const auto& in) { return sum(in[0].t(), {1}); }, {random_tensor({3, 4}, 42)});
  expect_gradients_match([](const auto& in) { return mean(in[0], {0}); }, {random_tensor({}, 43)});
}

TEST(ReduceTest, VarGradientMatchesFiniteDifferences) {
  const Tensor a = random_tensor({3, 4}, 51);
  for (int64_t correction : {0, 1}) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, {1}, {0}}) {
      SCOPED_TRACE(shape_str(dims) + " correction " + std::to_string(correction));
      expect_gradients_match([&](const auto& in) { return var(in[0], dims, correction, false); }, {a});
      expect_gradients_match([&](const auto& in) { return var(in[0], dims, correction, true); }, {a});
    }
  }
  expect_gradients_match([](const auto& in) { return var(in[0].t(), {0}); }, {random_tensor({4, 3}, 52)});
}

// var's backward, 2 (x - mean) g / divisor, centres f16/bf16 inputs on the
// f32 mean (f16/bf16 ops compute in f32, include/encore/ops.h): a mean
// rounded to the input dtype shifted every gradient by the same amount, so
// f16 [100, 100.0625, 100.125, 100.1875] got [-0.0833, -0.0417, 0, 0.0417]
// instead of [-0.0625, -0.0208, 0.0208, 0.0625]. Against the double formula
// on the (exact) upcasts, to one rounding of the result (half_ulp) and
// 1e-5 absolute (the f32 mean's own error times 2 |g| / divisor, below
// 1e-6 here); the mean's rounding gave errors of 5e-4 and more.
// f32 gives the bits of the composed f32 formula, as before.
TEST(ReduceTest, VarBackwardOfHalfDtypesCentresOnTheF32Mean) {
  auto ref_grad = [](const Tensor& x, const Tensor& g, int64_t rows, int64_t cols, int64_t dim, double divisor) {
    const std::vector<double> xv = values(x), gv = values(g);
    std::vector<double> out(xv.size());
    const int64_t lines = dim == 1 ? rows : cols, n = dim == 1 ? cols : rows;
    for (int64_t l = 0; l < lines; ++l) {
      auto at = [&](int64_t k) { return dim == 1 ? l * cols + k : k * cols + l; };
      double m = 0;
      for (int64_t k = 0; k < n; ++k) m += xv[at(k)];
      m /= static_cast<double>(n);
      for (int64_t k = 0; k < n; ++k) out[at(k)] = 2 * (xv[at(k)] - m) * gv[l] / divisor;
    }
    return out;
  };
  struct Case { DType dtype; std::vector<float> x; };
  for (const Case& c : {Case{kFloat16, {100, 100.0625f, 100.125f, 100.1875f}}, Case{kBFloat16, {100, 100.5f, 101, 101.5f}}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " probe");
    Tensor x = from_vector<float>(c.x, {1, 4}).to(c.dtype).requires_grad_();
    var(x, {1}).backward(ones({1}, c.dtype));
    expect_near(x.grad(), ref_grad(x.detach(), ones({1}), 1, 4, 1, 3.0), 1e-5, testing::half_ulp(c.dtype));
  }
  const int64_t rows = 7, cols = 33;
  for (DType dt : {kFloat16, kBFloat16, kFloat32}) {
    for (int64_t dim : {0, 1}) {
      for (int64_t correction : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(dim) + " correction " +
                     std::to_string(correction));
        Tensor x = add(random_tensor({rows, cols}, 60 + dim), 50.0).to(dt).requires_grad_();
        const Tensor g = random_tensor({dim == 1 ? rows : cols}, 62 + dim, dt);
        var(x, {dim}, correction).backward(g);
        EXPECT_EQ(x.grad().dtype(), dt);
        const double divisor = static_cast<double>((dim == 1 ? cols : rows) - correction);
        if (dt == kFloat32) {
          const Tensor xd = x.detach();
          const Tensor want = mul(sub(xd, mean(xd, {dim}, true)), mul(g.unsqueeze(dim), 2.0 / divisor));
          EXPECT_EQ(values(x.grad()), values(want));
        } else {
          expect_near(x.grad(), ref_grad(x.detach(), g, rows, cols, dim, divisor), 1e-5, testing::half_ulp(dt));
        }
      }
    }
  }
}

TEST(ReduceTest, MaxGradientGoesToTheArgmax) {
  const Tensor a = distinct_tensor({3, 4, 5});
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (keepdim ? " keepdim" : ""));
      expect_gradients_match([&](const auto& in) { return max(in[0], dim, keepdim).first; }, {a});
    }
  }
  expect_gradients_match([](const auto& in) { return max(in[0].transpose(0, 2), 1).first; }, {a});
  expect_gradients_match([](const auto& in) { return max(in[0]); }, {a});
  expect_gradients_match([](const auto& in) { return max(in[0].t()); }, {distinct_tensor({4, 6})});
}

TEST(ReduceTest, MaxGradientOfTiesGoesToTheFirstIndexOnly) {
  Tensor a = from_vector<float>({1, 7, 3, 7, 7, 2}, {2, 3}).requires_grad_();
  max(a, 1).first.backward(from_vector<float>({10, 20}));
  expect_near(a.grad(), {0, 10, 0, 20, 0, 0});
  Tensor b = from_vector<float>({1, 7, 3, 7, 7, 2}, {2, 3}).requires_grad_();
  max(b).backward();
  expect_near(b.grad(), {0, 1, 0, 0, 0, 0});
  // Ties far apart in a long full reduction (different blocks).
  Tensor c = zeros({100000});
  c.slice(0, 99990, 99991).fill_(5.0);
  c.slice(0, 12, 13).fill_(5.0);
  c.requires_grad_();
  max(c).backward();
  std::vector<float> g = c.grad().to_vector<float>();
  EXPECT_EQ(g[12], 1.0f);
  EXPECT_EQ(g[99990], 0.0f);
}

TEST(ReduceTest, SumToGradientMatchesFiniteDifferences) {
  for (const Shape& target : {Shape{3, 4}, Shape{2, 1, 4}, Shape{1}, Shape{}}) {
    SCOPED_TRACE(shape_str(target));
    expect_gradients_match([&](const auto& in) { return sum_to(in[0], target); }, {random_tensor({2, 3, 4}, 61)});
  }
  expect_gradients_match([](const auto& in) { return sum_to(in[0], Shape{3, 4}); }, {random_tensor({1, 3, 4}, 64)});
  // Through expand, whose backward is sum_to.
  expect_gradients_match([](const auto& in) { return mul(in[0].expand({3, 4}), in[1]); },
                         {random_tensor({1, 4}, 62), random_tensor({3, 4}, 63)});
}

TEST(ReduceTest, HalfPrecisionGradientsKeepTheirDtype) {
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor a = random_tensor({3, 4}, 71, dt).requires_grad_();
    add(add(sum(a, {1}), mean(a, {1})), add(var(a, {1}), max(a, 1).first)).sum().backward();
    EXPECT_EQ(a.grad().dtype(), dt);
    EXPECT_EQ(a.grad().shape(), Shape({3, 4}));
  }
}

// ---- errors ----

TEST(ReduceTest, BadArgumentsThrowNamingOpShapeAndDim) {
  const Tensor a = zeros({2, 3});
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  expect_error([&] { (void)sum(a, {2}); }, kInvalid, {"sum", "dim 2", "[2, 3]"});
  expect_error([&] { (void)mean(a, {-3}); }, kInvalid, {"mean", "dim -3", "[2, 3]"});
  expect_error([&] { (void)sum(scalar_tensor(1.0), {1}); }, kInvalid, {"sum", "dim 1", "[]"});
  expect_error([&] { (void)sum(a, {1, -1}); }, kInvalid, {"sum", "dim 1", "more than once", "[2, 3]"});
  expect_error([&] { (void)var(a, {0, 0}); }, kInvalid, {"var", "dim 0", "more than once"});
  expect_error([&] { (void)max(a, 5); }, kInvalid, {"max", "dim 5", "[2, 3]"});
  expect_error([&] { (void)argmax(a, -4); }, kInvalid, {"argmax", "dim -4", "[2, 3]"});
  expect_error([] { (void)mean(zeros({2, 3}, kInt32)); }, kInvalid, {"mean", "[2, 3]", "i32"});
  expect_error([] { (void)var(zeros({4}, kInt64), {0}); }, kInvalid, {"var", "[4]", "i64"});
  expect_error([] { (void)max(zeros({2, 0}), 1); }, kInvalid, {"max", "dim 1", "size 0", "[2, 0]"});
  expect_error([] { (void)argmax(zeros({0, 2}), 0); }, kInvalid, {"argmax", "dim 0", "[0, 2]"});
  expect_error([] { (void)max(zeros({0, 2})); }, kInvalid, {"max", "empty", "[0, 2]"});
  expect_error([] { (void)max(zeros({2}, kBool), 0); }, kInvalid, {"max", "bool", "[2]"});
  const Tensor b = zeros({2, 3, 4});
  expect_error([&] { (void)sum_to(b, Shape{3}); }, kInvalid, {"sum_to", "[3]", "[2, 3, 4]"});
  expect_error([&] { (void)sum_to(b, Shape{5, 4}); }, kInvalid, {"sum_to", "[5, 4]", "[2, 3, 4]"});
  expect_error([&] { (void)sum_to(b, Shape{1, 2, 3, 4}); }, kInvalid, {"sum_to", "[1, 2, 3, 4]", "[2, 3, 4]"});
  expect_error([&] { (void)sum_to(zeros({2, 1}), Shape{2, 0}); }, kInvalid, {"sum_to", "[2, 0]", "[2, 1]"});
  expect_error([] { (void)sum(Tensor()); }, kInvalid, {"sum", "undefined"});
  // max over an empty dim of size 0 elsewhere is fine: nothing to reduce per output, no outputs.
  EXPECT_EQ(max(zeros({0, 3}), 1).first.shape(), Shape({0}));
}

}  // namespace
}  // namespace encore
