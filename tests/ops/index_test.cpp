// gather, index_select, scatter_add, topk and multinomial: values against
// plain-loop references in several dtypes and dims (strided and expanded
// operands included), gradients against finite differences, determinism of
// scatter_add, the Philox draws of multinomial (offset advance, frequencies,
// no repeats without replacement) and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::non_contiguous;
using testing::random_tensor;
using testing::unravel;
using testing::values;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

int64_t flat(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// A random index of `shape` with entries in [0, size).
Tensor random_index(Shape shape, int64_t size, uint64_t seed, DType dtype = kInt64) {
  std::vector<int64_t> v;
  for (double x : values(random_tensor(shape, seed))) {
    v.push_back(static_cast<int64_t>(std::floor((std::erf(x / std::sqrt(2.0)) + 1) / 2 * size)) % size);
  }
  return from_vector<int64_t>(v, shape).to(dtype);
}

std::vector<double> gather_ref(const Tensor& in, int64_t dim, const Tensor& index) {
  const std::vector<double> iv = values(in), xv = values(index);
  std::vector<double> out;
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, index.shape());
    idx[dim] = static_cast<int64_t>(xv[i]);
    out.push_back(iv[flat(idx, in.shape())]);
  }
  return out;
}

std::vector<double> scatter_add_ref(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<double> out = values(in);
  const std::vector<double> xv = values(index), sv = values(src);
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, index.shape());
    const double v = sv[flat(idx, src.shape())];
    idx[dim] = static_cast<int64_t>(xv[i]);
    out[flat(idx, in.shape())] += v;
  }
  return out;
}

TEST(IndexTest, GatherMatchesReference) {
  const Tensor in = random_tensor({4, 5, 3}, 1);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape ishape = {3, 4, 2};   // smaller than in outside dim; larger along dim is allowed
    ishape[dim] = 7;
    const Tensor idx = random_index(ishape, in.size(dim), 10 + dim);
    EXPECT_EQ(values(gather(in, dim, idx)), gather_ref(in, dim, idx));
    EXPECT_EQ(values(gather(non_contiguous(in), dim - 3, idx.to(kInt32))), gather_ref(in, dim, idx));
  }
  for (DType dt : {kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    const Tensor x = random_tensor({3, 6}, 2).to(dt), idx = random_index({3, 4}, 6, 3);
    EXPECT_EQ(values(gather(x, 1, idx)), gather_ref(x, 1, idx)) << dtype_name(dt);
  }
}

TEST(IndexTest, IndexSelectMatchesReference) {
  const Tensor in = random_tensor({4, 5, 3}, 4);
  const Tensor idx = from_vector<int64_t>({4, 0, 0, 2}, {4});
  for (int64_t dim = 0; dim < 3; ++dim) {
    const Tensor i = from_vector<int64_t>({std::min<int64_t>(2, in.size(dim) - 1), 0, 1, 0}, {4});
    const Tensor out = index_select(in, dim, i);
    Shape shape = in.shape();
    shape[dim] = 4;
    ASSERT_EQ(out.shape(), shape);
    // The reference: gather with the index broadcast over the other dims.
    Shape vs(3, 1);
    vs[dim] = 4;
    EXPECT_EQ(values(out), gather_ref(in, dim, i.view(vs).expand(shape).contiguous()));
  }
  const Tensor h = random_tensor({6, 2}, 5).to(kBFloat16);
  EXPECT_EQ(values(index_select(h, 0, idx.to(kInt32))), gather_ref(h, 0, idx.view({4, 1}).expand({4, 2}).contiguous()));
  EXPECT_EQ(index_select(in, 1, from_vector<int64_t>({}, {0})).shape(), (Shape{4, 0, 3}));
}

TEST(IndexTest, ScatterAddMatchesReference) {
  const Tensor in = random_tensor({4, 5, 3}, 6);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape ishape = {3, 4, 2};
    ishape[dim] = 6;
    const Tensor idx = random_index(ishape, in.size(dim), 20 + dim);
    const Tensor src = random_tensor({6, 6, 6}, 30 + dim);   // larger than index in every dim
    expect_near(scatter_add(in, dim, idx, src), scatter_add_ref(in, dim, idx, src), 1e-6, 1e-6);
    expect_near(scatter_add(non_contiguous(in), dim, non_contiguous(idx), src),
                scatter_add_ref(in, dim, idx, src), 1e-6, 1e-6);
  }
  const Tensor ii = random_index({3, 8}, 5, 7);
  const Tensor ints = random_index({3, 5}, 100, 8), isrc = random_index({3, 8}, 100, 9);
  EXPECT_EQ(values(scatter_add(ints, 1, ii, isrc)), scatter_add_ref(ints, 1, ii, isrc));
  const Tensor h = random_tensor({3, 5}, 10).to(kBFloat16), hs = random_tensor({3, 8}, 11).to(kBFloat16);
  expect_near(scatter_add(h, 1, ii, hs).to(kFloat32), scatter_add_ref(h, 1, ii, hs), 5e-2, 2e-2);
}

TEST(IndexTest, ScatterAddAddsInIndexOrder) {
  // Many adds into one element: the order is fixed (index order along dim),
  // so the bits equal a sequential f32 sum and do not change between runs.
  const int64_t n = 100000;
  const Tensor src = random_tensor({n}, 12);
  const Tensor idx = zeros({n}, kInt64);
  const Tensor out = scatter_add(zeros({1}), 0, idx, src);
  float s = 0.f;
  for (double v : values(src)) s += static_cast<float>(v);
  EXPECT_EQ(values(out)[0], static_cast<double>(s));
  EXPECT_EQ(values(scatter_add(zeros({1}), 0, idx, src)), values(out));
}

// f16/bf16 sums over repeated indices are f32 sums rounded once
// (include/encore/ops.h): in the backward of gather and index_select and in
// scatter_add, 3000 values into 3 columns give the f32 result of the same
// values within one rounding. Rounded at each add, bf16 ones stopped at 256.
TEST(IndexTest, HalfAndBFloat16SumRepeatedIndicesInF32) {
  const int64_t n = 3000;
  const Tensor idx = random_index({2, n}, 3, 24);
  const Tensor sel = idx.select(0, 0).contiguous();
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const double half_ulp = std::ldexp(1.0, dt == kFloat16 ? -11 : -8);   // relative
    for (const Tensor& g : {ones({2, n}, dt), random_tensor({2, n}, 25, dt)}) {
      {
        SCOPED_TRACE("gather");
        Tensor x = zeros({2, 3}, dt).requires_grad_(), xf = zeros({2, 3}).requires_grad_();
        gather(x, 1, idx).backward(g);
        gather(xf, 1, idx).backward(g.to(kFloat32));
        expect_near(x.grad(), values(xf.grad()), 0, half_ulp);
      }
      {
        SCOPED_TRACE("index_select");
        Tensor y = zeros({3, 2}, dt).requires_grad_(), yf = zeros({3, 2}).requires_grad_();
        index_select(y, 0, sel).backward(g.t());
        index_select(yf, 0, sel).backward(g.t().to(kFloat32));
        expect_near(y.grad(), values(yf.grad()), 0, half_ulp);
      }
      {
        SCOPED_TRACE("scatter_add");
        const Tensor in = random_tensor({2, 3}, 26, dt);
        const Tensor out = scatter_add(in, 1, idx, g);
        EXPECT_EQ(out.dtype(), dt);
        expect_near(out, values(scatter_add(in.to(kFloat32), 1, idx, g.to(kFloat32))), 0, half_ulp);
      }
    }
  }
}

TEST(IndexTest, GradientsMatchFiniteDifferences) {
  const Tensor idx = random_index({3, 4}, 5, 13);
  expect_gradients_match([&](const auto& in) { return gather(in[0], 1, idx); }, {random_tensor({3, 5}, 14)});
  expect_gradients_match([&](const auto& in) { return gather(in[0], 0, random_index({2, 5}, 3, 15)); },
                         {random_tensor({3, 5}, 16)});
  const Tensor sel = from_vector<int64_t>({2, 0, 2, 1}, {4});
  expect_gradients_match([&](const auto& in) { return index_select(in[0], 1, sel); }, {random_tensor({2, 3, 2}, 17)});
  expect_gradients_match([&](const auto& in) { return scatter_add(in[0], 1, idx, in[1]); },
                         {random_tensor({3, 5}, 18), random_tensor({3, 4}, 19)});
  expect_gradients_match([&](const auto& in) { return scatter_add(in[0], 1, idx, in[1]); },
                         {random_tensor({3, 5}, 20), random_tensor({4, 6}, 21)});   // src larger than index
  expect_gradients_match([](const auto& in) { return topk(in[0], 2, 1).first; }, {random_tensor({3, 5}, 22)});
  expect_gradients_match([](const auto& in) { return topk(in[0], 2, 0, false).first; }, {random_tensor({4, 3}, 23)});
}

// The k extreme values of each line, sorted, ties to the lower index, NaN largest.
void topk_ref(const Tensor& x, int64_t k, int64_t dim, bool largest, std::vector<double>* vals,
              std::vector<double>* idx) {
  const std::vector<double> v = values(x);
  int64_t outer = 1, inner = 1;
  const int64_t n = x.size(dim);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.size(d);
    if (d > dim) inner *= x.size(d);
  }
  vals->assign(outer * k * inner, 0);
  idx->assign(outer * k * inner, 0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t r = 0; r < inner; ++r) {
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      auto val = [&](int64_t j) { return v[(o * n + j) * inner + r]; };
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const double va = val(a), vb = val(b);
        if (std::isnan(va) || std::isnan(vb)) return largest ? (std::isnan(va) && !std::isnan(vb))
                                                             : (!std::isnan(va) && std::isnan(vb));
        return largest ? va > vb : va < vb;
      });
      for (int64_t j = 0; j < k; ++j) {
        (*vals)[(o * k + j) * inner + r] = val(order[j]);
        (*idx)[(o * k + j) * inner + r] = static_cast<double>(order[j]);
      }
    }
  }
}

TEST(IndexTest, TopkMatchesReference) {
  // Values with ties (rounded) and a NaN.
  Tensor x = mul(random_tensor({4, 9, 3}, 24), 2.0).to(kInt32).to(kFloat32);
  x.reshape({-1}).slice(0, 5, 6).fill_(NAN);
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (bool largest : {true, false}) {
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{3}, x.size(dim)}) {
        if (k > x.size(dim)) continue;
        std::vector<double> rv, ri;
        topk_ref(x, k, dim, largest, &rv, &ri);
        const auto [v, i] = topk(non_contiguous(x), k, dim, largest);
        const std::vector<double> got = values(v);
        ASSERT_EQ(got.size(), rv.size());
        for (size_t j = 0; j < got.size(); ++j) {
          EXPECT_TRUE(got[j] == rv[j] || (std::isnan(got[j]) && std::isnan(rv[j]))) << j;
        }
        EXPECT_EQ(values(i), ri) << "dim " << dim << " largest " << largest << " k " << k;
        EXPECT_EQ(i.dtype(), kInt64);
      }
    }
  }
  for (DType dt : {kFloat16, kBFloat16, kInt32, kInt64}) {
    const Tensor y = mul(random_tensor({3, 7}, 25), 10.0).to(dt);
    std::vector<double> rv, ri;
    topk_ref(y, 4, 1, true, &rv, &ri);
    const auto [v, i] = topk(y, 4);
    EXPECT_EQ(values(v), rv) << dtype_name(dt);
    EXPECT_EQ(values(i), ri) << dtype_name(dt);
    EXPECT_EQ(v.dtype(), dt);
  }
}

TEST(IndexTest, MultinomialDrawsFollowTheWeights) {
  const Tensor p = from_vector<float>({0.1f, 0.0f, 0.6f, 0.3f, 2.0f, 0.0f, 0.0f, 2.0f}, {2, 4});
  Generator g(7);
  const int64_t draws = 20000;
  const Tensor s = multinomial(p, draws, /*replacement=*/true, &g);
  EXPECT_EQ(s.shape(), (Shape{2, draws}));
  EXPECT_EQ(g.offset(), static_cast<uint64_t>(2 * draws));   // advanced on the device by rows * samples
  const std::vector<double> v = values(s);
  std::vector<double> freq(8, 0);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t j = 0; j < draws; ++j) freq[r * 4 + static_cast<int64_t>(v[r * draws + j])] += 1.0 / draws;
  }
  const std::vector<double> expect = {0.1, 0.0, 0.6, 0.3, 0.5, 0.0, 0.0, 0.5};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(freq[i], expect[i], 0.02) << i;
  // The same seed draws the same samples; the next draw differs.
  Generator g2(7);
  EXPECT_EQ(values(multinomial(p, draws, true, &g2)), v);
  EXPECT_NE(values(multinomial(p, draws, true, &g2)), v);
}

TEST(IndexTest, MultinomialWithoutReplacementNeverRepeats) {
  const Tensor p = add(sigmoid(random_tensor({5, 6}, 26)), 0.01).to(kBFloat16);
  Generator g(3);
  const Tensor s = multinomial(p, 6, false, &g);
  for (int64_t r = 0; r < 5; ++r) {
    const std::vector<double> row = values(s.select(0, r));
    EXPECT_EQ(std::set<double>(row.begin(), row.end()).size(), 6u) << r;
  }
  // Zero weights are never drawn while others remain.
  const Tensor q = from_vector<float>({0.f, 1.f, 0.f, 3.f, 1.f}, {5});
  for (int i = 0; i < 20; ++i) {
    const std::vector<double> row = values(multinomial(q, 3, false, &g));
    EXPECT_EQ(std::set<double>(row.begin(), row.end()), (std::set<double>{1, 3, 4}));
  }
}

// Finite weights whose f32 sum overflows ([2e38] * 3: the host check takes
// them) are a distribution: the draws sum the weights in double. With an
// f32 sum of inf every draw went to the last positive category (0, 0 and
// 6000 of 6000). 3000 rows of 2 draws: each category expects 2000 of 6000
// (with replacement, binomial sd 37; without, 2 of the 3 in every row); the
// bounds 25 % and 42 % (1500 and 2520) are over 13 sd away, and the seed is
// fixed.
TEST(IndexTest, MultinomialOfWeightsWhoseF32SumOverflows) {
  const Tensor p = from_vector<float>({2e38f, 2e38f, 2e38f, 0.0f}, {1, 4}).expand({3000, 4}).contiguous();
  for (bool replacement : {true, false}) {
    SCOPED_TRACE(replacement ? "with replacement" : "without replacement");
    Generator g(11);
    const std::vector<double> v = values(multinomial(p, 2, replacement, &g));
    std::vector<int64_t> count(4, 0);
    for (double c : v) ++count[static_cast<int64_t>(c)];
    for (int c = 0; c < 3; ++c) {
      EXPECT_GE(count[c], 1500) << c;
      EXPECT_LE(count[c], 2520) << c;
    }
    EXPECT_EQ(count[3], 0);
    if (!replacement) {
      for (size_t r = 0; r < v.size(); r += 2) EXPECT_NE(v[r], v[r + 1]) << r / 2;
    }
  }
}

// Small weights after a large one are drawn (running sums in double): 1.0
// and 3000 weights of 2e-8, which an f32 running sum absorbs (1 + 2e-8 ==
// 1), so with the large weight first they were never drawn (0 of 200000
// draws; 12 of 200000 with it last). Expected 200000 * 6e-5 / (1 + 6e-5) =
// 12.0 draws of the small ones in either order: bounds [1, 40] (Poisson(12)
// gives 0 with probability 6e-6 and more than 40 below 1e-9; fixed seed).
// 20 rows of 10000 draws, so the scan runs on every worker.
TEST(IndexTest, MultinomialDrawsSmallWeightsAfterALargeOne) {
  const int64_t small = 3000, rows = 20, samples = 10000;
  for (bool large_first : {true, false}) {
    SCOPED_TRACE(large_first ? "large weight first" : "large weight last");
    std::vector<float> w(small + 1, 2e-8f);
    w[large_first ? 0 : small] = 1.0f;
    const Tensor p = from_vector<float>(w, {1, small + 1}).expand({rows, small + 1}).contiguous();
    Generator g(5);
    const std::vector<double> v = values(multinomial(p, samples, true, &g));
    int64_t drawn_small = 0;
    for (double c : v) drawn_small += w[static_cast<size_t>(c)] < 0.5f;
    EXPECT_GE(drawn_small, 1);
    EXPECT_LE(drawn_small, 40);
  }
}

// An empty batch may ask for 2^63 - 1 samples a row: [0, 2^63 - 1] is empty
// and valid, but the CPU kernel sized its work with classes x samples, past
// int64 (a signed overflow under ./run sanitize: ops_fuzz). Nothing is
// drawn, so the generator's offset stays.
TEST(IndexTest, MultinomialOfAnEmptyBatchDrawsNothing) {
  Generator g(3);
  const Tensor s = multinomial(ones({0, 2}), INT64_MAX, /*replacement=*/true, &g);
  EXPECT_EQ(s.shape(), (Shape{0, INT64_MAX}));
  EXPECT_EQ(g.offset(), 0u);
}

TEST(IndexTest, Refusals) {
  const Tensor x = random_tensor({3, 4}, 1);
  expect_error([&] { gather(x, 1, from_vector<int64_t>({0, 4, 1}, {3, 1})); }, kInvalid,
               {"gather", "index 4", "size 4", "[3, 4]"});
  expect_error([&] { gather(x, 1, zeros({4, 1}, kInt64)); }, kInvalid, {"gather", "[4, 1]", "[3, 4]"});
  expect_error([&] { gather(x, 1, zeros({3}, kInt64)); }, kInvalid, {"gather", "[3]", "[3, 4]"});
  expect_error([&] { gather(x, 1, zeros({3, 1})); }, kInvalid, {"gather", "i32 or i64", "f32"});
  expect_error([&] { gather(x, 2, zeros({3, 1}, kInt64)); }, kInvalid, {"gather", "dim 2"});
  expect_error([&] { index_select(x, 0, from_vector<int64_t>({-1}, {1})); }, kInvalid, {"index_select", "index -1"});
  expect_error([&] { index_select(x, 0, zeros({1, 1}, kInt64)); }, kInvalid, {"index_select", "[1, 1]"});
  expect_error([&] { scatter_add(x, 0, zeros({3, 4}, kInt64), random_tensor({2, 4}, 2)); }, kInvalid,
               {"scatter_add", "[3, 4]", "[2, 4]", "src"});
  expect_error([&] { scatter_add(x, 0, zeros({1, 1}, kInt64), x.to(kFloat16)); }, kInvalid, {"scatter_add", "f16"});
  expect_error([&] { scatter_add(x.to(kBool), 0, zeros({1, 1}, kInt64), x.to(kBool)); }, kInvalid,
               {"scatter_add", "bool"});
  expect_error([&] { topk(x, 5, 1); }, kInvalid, {"topk", "k = 5", "size 4"});
  expect_error([&] { topk(scalar_tensor(1.0), 0); }, kInvalid, {"topk", "0-d", "k = 0"});
  EXPECT_EQ(values(topk(scalar_tensor(2.0), 1).first), std::vector<double>{2.0});
  expect_error([&] { multinomial(from_vector<float>({0.f, 0.f}, {2}), 1); }, kInvalid, {"multinomial", "sums to 0"});
  expect_error([&] { multinomial(from_vector<float>({1.f, -1.f}, {2}), 1); }, kInvalid,
               {"multinomial", "probs[0][1]", "non-negative"});
  expect_error([&] { multinomial(from_vector<float>({1.f, 0.f, 2.f}, {3}), 3); }, kInvalid,
               {"multinomial", "2 non-zero categories", "3 samples"});
  expect_error([&] { multinomial(from_vector<float>({1.f, 0.f, 2.f}, {3}), 4); }, kInvalid,
               {"multinomial", "4 samples", "3 categories"});
  EXPECT_EQ(multinomial(from_vector<float>({1.f, 0.f, 2.f}, {3}), 4, true).shape(), (Shape{4}));
  expect_error([&] { multinomial(ones({2, 5}), int64_t{1} << 62, true); }, kInvalid,
               {"multinomial", "[2, 4611686018427387904]", "more than 2^63"});
}

}  // namespace
}  // namespace encore
