// concat, stack and split against host references, their backward against
// finite differences, and their errors.
#include <limits>
#include <gtest/gtest.h>

#include "encore/encore.h"
#include "src/autograd/node.h"
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

// Host concat: element idx of the output comes from the piece whose range
// along dim holds idx[dim]. Returns the output shape in *shape.
std::vector<double> host_concat(const std::vector<Tensor>& ts, int64_t dim, Shape* shape) {
  *shape = ts[0].shape();
  std::vector<int64_t> starts;
  (*shape)[dim] = 0;
  for (const Tensor& t : ts) {
    starts.push_back((*shape)[dim]);
    (*shape)[dim] += t.shape()[dim];
  }
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : ts) vals.push_back(values(t));
  std::vector<double> out(numel_of(*shape));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    std::vector<int64_t> idx = unravel(i, *shape);
    size_t k = ts.size() - 1;
    while (idx[dim] < starts[k]) --k;
    idx[dim] -= starts[k];
    int64_t flat = 0;
    for (int64_t d = 0; d < ts[k].dim(); ++d) flat = flat * ts[k].shape()[d] + idx[d];
    out[i] = vals[k][flat];
  }
  return out;
}

struct ConcatCase {
  std::vector<Shape> shapes;
  int64_t dim;
};

const std::vector<ConcatCase>& concat_cases() {
  static const std::vector<ConcatCase> cases = {
      {{{3}, {2}}, 0},
      {{{2, 3}, {4, 3}}, 0},
      {{{2, 3}, {2, 1}, {2, 5}}, 1},
      {{{2, 3}, {2, 1}, {2, 5}}, -1},
      {{{2, 0, 4}, {2, 3, 4}, {2, 0, 4}}, 1},   // 0-size pieces
      {{{0, 3}, {0, 3}}, 0},                    // everything empty
      {{{2, 3, 4}}, 2},                         // a single piece
      {{{1, 2, 1}, {1, 2, 3}}, 2},              // size-1 dims
      {{{3, 2, 2}, {1, 2, 2}, {2, 2, 2}}, -3},
  };
  return cases;
}

std::vector<Tensor> make_inputs(const std::vector<Shape>& shapes, DType dtype, uint64_t seed, bool strided) {
  std::vector<Tensor> ts;
  for (const Shape& s : shapes) {
    Tensor t = mul(random_tensor(s, seed++), 4.0).to(dtype);
    ts.push_back(strided ? non_contiguous(t) : t);
  }
  return ts;
}

TEST(JoinTest, ConcatMatchesHostReference) {
  for (const ConcatCase& c : concat_cases()) {
    for (bool strided : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "first " << shape_str(c.shapes[0]) << " dim " << c.dim
                                        << (strided ? " strided" : ""));
      std::vector<Tensor> ts = make_inputs(c.shapes, kFloat32, 10, strided);
      const int64_t d = c.dim < 0 ? c.dim + ts[0].dim() : c.dim;
      Shape shape;
      std::vector<double> expected = host_concat(ts, d, &shape);
      Tensor out = concat(ts, c.dim);
      EXPECT_EQ(out.shape(), shape);
      EXPECT_TRUE(out.is_contiguous());
      expect_near(out, expected, 0, 0);   // a copy: exact
    }
  }
}

TEST(JoinTest, ConcatIsExactInEveryDtype) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<Tensor> ts = make_inputs({{2, 3}, {2, 2}}, dt, 3, true);
    Shape shape;
    std::vector<double> expected = host_concat(ts, 1, &shape);
    Tensor out = concat(ts, 1);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_EQ(out.shape(), shape);
    expect_near(out, expected, 0, 0);
  }
}

TEST(JoinTest, ConcatCopiesRatherThanAliases) {
  Tensor a = random_tensor({2, 2}, 1), b = random_tensor({1, 2}, 2);
  Tensor out = concat({a, b});
  const std::vector<double> before = values(out);
  a.fill_(7.0);
  EXPECT_EQ(values(out), before);
  EXPECT_NE(out.storage(), a.storage());
}

TEST(JoinTest, StackMatchesHostReference) {
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    for (bool strided : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << (strided ? " strided" : ""));
      std::vector<Tensor> ts = make_inputs({{2, 3}, {2, 3}, {2, 3}, {2, 3}}, kFloat32, 20, strided);
      Tensor out = stack(ts, dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape shape = {2, 3};
      shape.insert(shape.begin() + d, 4);
      ASSERT_EQ(out.shape(), shape);
      std::vector<std::vector<double>> vals;
      for (const Tensor& t : ts) vals.push_back(values(t));
      std::vector<double> expected(out.numel());
      for (int64_t i = 0; i < out.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        const int64_t k = idx[d];
        idx.erase(idx.begin() + d);
        expected[i] = vals[k][idx[0] * 3 + idx[1]];
      }
      expect_near(out, expected, 0, 0);
    }
  }
}

TEST(JoinTest, StackOfScalarsAndEmptyTensors) {
  Tensor s = stack({scalar_tensor(1.5), scalar_tensor(-2.0), scalar_tensor(3.0)});
  EXPECT_EQ(s.shape(), Shape({3}));
  expect_near(s, {1.5, -2.0, 3.0}, 0, 0);
  Tensor e = stack({zeros({0, 2}), zeros({0, 2})}, 1);
  EXPECT_EQ(e.shape(), Shape({0, 2, 2}));
  Tensor i = stack({arange(3), arange(2, 5)}, 1);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1, 3, 2, 4}));
}

TEST(JoinTest, SplitReturnsViewsWithASmallerLastPiece) {
  Tensor a = random_tensor({3, 7}, 5);
  std::vector<Tensor> pieces = split(a, 3, 1);
  ASSERT_EQ(pieces.size(), 3u);
  const std::vector<double> av = values(a);
  const int64_t sizes[] = {3, 3, 1};
  for (size_t k = 0; k < pieces.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(pieces[k].shape(), Shape({3, sizes[k]}));
    EXPECT_EQ(pieces[k].storage(), a.storage());   // a view, not a copy
    std::vector<double> expected;
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < sizes[k]; ++c) expected.push_back(av[r * 7 + 3 * k + c]);
    }
    expect_near(pieces[k], expected, 0, 0);
  }
  // Writing through a piece changes a.
  pieces[2].fill_(42.0);
  EXPECT_EQ(values(a)[6], 42.0);
  EXPECT_EQ(values(a)[20], 42.0);
}

TEST(JoinTest, SplitEdgeCases) {
  Tensor a = arange(6).reshape({6, 1});
  EXPECT_EQ(split(a, 2).size(), 3u);                   // divides evenly
  EXPECT_EQ(split(a, 6).size(), 1u);                   // one piece
  std::vector<Tensor> big = split(a, 10);              // size beyond the dim: the whole tensor
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].shape(), Shape({6, 1}));
  std::vector<Tensor> unit = split(a, 1, -2);
  ASSERT_EQ(unit.size(), 6u);
  EXPECT_EQ(unit[4].item<int64_t>(), 4);
  std::vector<Tensor> none = split(zeros({0, 3}), 2);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].shape(), Shape({0, 3}));
  // Round trip: concat undoes split, also on non-contiguous input.
  Tensor b = non_contiguous(random_tensor({5, 4}, 8));
  expect_near(concat(split(b, 2, 0), 0), values(b), 0, 0);
  expect_near(concat(split(b, 3, 1), 1), values(b), 0, 0);
}

TEST(JoinTest, ConcatErrorsNameTheShapes) {
  Tensor a = zeros({2, 3}), b = zeros({2, 4}), h = zeros({2, 3}, kFloat16);
  expect_error([&] { (void)concat({}); }, kInvalid, {"concat", "at least one"});
  expect_error([&] { (void)concat({a, b}, 0); }, kInvalid, {"concat", "[2, 3]", "[2, 4]", "dim 0"});
  expect_error([&] { (void)concat({a, zeros({2, 3, 1})}, 1); }, kInvalid, {"concat", "[2, 3]", "[2, 3, 1]"});
  expect_error([&] { (void)concat({a, h}, 0); }, kInvalid, {"concat", "f32", "f16", "[2, 3]"});
  expect_error([&] { (void)concat({a, Tensor()}, 0); }, kInvalid, {"concat", "tensor 1", "undefined"});
  expect_error([&] { (void)concat({a, a}, 2); }, kInvalid, {"concat", "dim 2"});
  expect_error([&] { (void)concat({scalar_tensor(1), scalar_tensor(2)}); }, kInvalid, {"concat", "0-d"});
}

// Sizes that add up past int64 are refused before they size an output
// (issue #17): broadcast views of 2^62 elements each.
TEST(JoinTest, ConcatWhoseSizesOverflowIsRefused) {
  const Tensor huge = ones({1}).expand({int64_t{1} << 62}), half = ones({1}).expand({int64_t{1} << 61});
  expect_error([&] { (void)concat({huge, huge}); }, kInvalid,
               {"concat", "2 tensors", "[4611686018427387904]", "add up past int64"});
  expect_error([&] { (void)concat({half, half}); }, absl::StatusCode::kResourceExhausted,
               {"concat", "[4611686018427387904]", "2^63 bytes"});
}

TEST(JoinTest, StackAndSplitErrors) {
  Tensor a = zeros({2, 3});
  expect_error([&] { (void)stack({}); }, kInvalid, {"stack", "at least one"});
  expect_error([&] { (void)stack({a, zeros({3, 2})}); }, kInvalid, {"stack", "[2, 3]", "[3, 2]"});
  expect_error([&] { (void)stack({a, zeros({2, 3}, kInt32)}); }, kInvalid, {"stack", "f32", "i32"});
  expect_error([&] { (void)stack({a, a}, 3); }, kInvalid, {"stack", "dim 3"});
  expect_error([&] { (void)split(a, 0, 1); }, kInvalid, {"split", "positive", "[2, 3]"});
  expect_error([&] { (void)split(a, -2); }, kInvalid, {"split", "positive", "[2, 3]"});
  expect_error([&] { (void)split(a, 1, 2); }, kInvalid, {"split", "dim 2"});
  expect_error([&] { (void)split(scalar_tensor(1), 1); }, kInvalid, {"split", "0-d"});
}

// Regression (fuzz/ops_fuzz): split with a size near INT64_MAX computed
// start + size and n + size - 1 in int64 (signed overflow, UB). One piece,
// the whole tensor; the same for a dim of 2^62 + 1 elements (a broadcast view).
TEST(JoinTest, SplitWithAHugeSizeDoesNotOverflow) {
  Tensor a = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  for (int64_t size : {int64_t{3}, int64_t{4}, std::numeric_limits<int64_t>::max()}) {
    std::vector<Tensor> pieces = split(a, size, 1);
    ASSERT_EQ(pieces.size(), 1u) << size;
    EXPECT_EQ(pieces[0].shape(), Shape({2, 3}));
  }
  const Tensor wide = ones({1}).expand({(int64_t{1} << 62) + 1});
  std::vector<Tensor> halves = split(wide, int64_t{1} << 62);
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[0].numel(), int64_t{1} << 62);
  EXPECT_EQ(halves[1].numel(), 1);
  EXPECT_EQ(split(wide, std::numeric_limits<int64_t>::max()).size(), 1u);
  // Found by fuzz/ops_fuzz in CI: 2^62 pieces of size 1 threw std::length_error.
  try {
    (void)split(wide, 1);
    FAIL() << "2^62 pieces";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted) << e.status();
    EXPECT_NE(e.status().message().find("at most 16777216 pieces"), absl::string_view::npos) << e.status();
  }
}

TEST(JoinTest, ConcatBackwardMatchesFiniteDifferences) {
  expect_gradients_match([](const auto& in) { return concat({in[0], in[1], in[2]}, 1); },
                         {random_tensor({2, 3}, 1), random_tensor({2, 1}, 2), random_tensor({2, 2}, 3)});
  expect_gradients_match([](const auto& in) { return concat({in[0], in[1]}, -3); },
                         {random_tensor({1, 2, 2}, 4), random_tensor({2, 2, 2}, 5)});
  // The same tensor twice: both slices accumulate into it.
  expect_gradients_match([](const auto& in) { return concat({in[0], in[0].t()}, 0); }, {random_tensor({2, 2}, 6)});
}

TEST(JoinTest, ConcatBackwardSkipsInputsWithoutGrad) {
  Tensor a = random_tensor({2, 2}, 1).requires_grad_();
  Tensor b = random_tensor({2, 2}, 2);
  Tensor empty_piece = zeros({0, 2}).requires_grad_();
  Tensor out = concat({b, empty_piece, a});
  EXPECT_TRUE(out.requires_grad());
  Tensor g = random_tensor({4, 2}, 3);
  out.backward(g);
  const std::vector<double> gv = values(g);
  expect_near(a.grad(), std::vector<double>(gv.begin() + 4, gv.end()), 0, 0);
  EXPECT_FALSE(b.grad().defined());
  ASSERT_TRUE(empty_piece.grad().defined());
  EXPECT_EQ(empty_piece.grad().shape(), Shape({0, 2}));
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(concat({a, b}).requires_grad());
  }
}

TEST(JoinTest, StackBackwardMatchesFiniteDifferences) {
  expect_gradients_match([](const auto& in) { return stack({in[0], in[1], in[2]}, 1); },
                         {random_tensor({2, 3}, 1), random_tensor({2, 3}, 2), random_tensor({2, 3}, 3)});
  expect_gradients_match([](const auto& in) { return stack({in[1], in[0]}, -1); },
                         {random_tensor({3}, 4), random_tensor({3}, 5)});
  Tensor a = random_tensor({2}, 1).requires_grad_();
  Tensor out = stack({a, random_tensor({2}, 2)});
  out.backward(from_vector<float>({1, 2, 3, 4}, {2, 2}));
  expect_near(a.grad(), {1, 2}, 0, 0);
}

TEST(JoinTest, SplitBackwardMatchesFiniteDifferences) {
  expect_gradients_match(
      [](const auto& in) {
        std::vector<Tensor> p = split(in[0], 2, 1);   // [3,2] [3,2] [3,1]
        return concat({mul(p[2], 3.0), p[0]}, 1);   // p[1] unused: its gradient is 0
      },
      {random_tensor({3, 5}, 1)});
  expect_gradients_match([](const auto& in) { return split(in[0], 3, 0)[1]; }, {random_tensor({7, 2}, 2)});
}

// One node for all the pieces: its backward copies each gradient into its
// slice of one buffer (no zero-filled input-sized gradient per piece, no
// adds), and zeros only the pieces that got none.
TEST(JoinTest, SplitRecordsOneNodeForAllItsPieces) {
  Tensor a = random_tensor({4, 6}, 3).requires_grad_();
  std::vector<Tensor> p = split(a, 2, 1);
  ASSERT_EQ(p.size(), 3u);
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_NE(p[i].grad_fn(), nullptr);
    EXPECT_EQ(p[i].grad_fn(), p[0].grad_fn());
    EXPECT_STREQ(p[i].grad_fn()->name(), "split");
  }
  concat({mul(p[0], 1.0), mul(p[1], 2.0), mul(p[2], 3.0)}, 1).backward(ones({4, 6}));
  std::vector<double> want;
  for (int r = 0; r < 4; ++r) want.insert(want.end(), {1, 1, 2, 2, 3, 3});
  expect_near(a.grad(), want, 0, 0);
  Tensor b = random_tensor({4, 6}, 4).requires_grad_();
  split(b, 4, 1)[1].backward(ones({4, 2}));   // only the last piece
  want.clear();
  for (int r = 0; r < 4; ++r) want.insert(want.end(), {0, 0, 0, 0, 1, 1});
  expect_near(b.grad(), want, 0, 0);
}

}  // namespace
}  // namespace encore
