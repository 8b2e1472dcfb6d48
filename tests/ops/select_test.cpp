// where and masked_fill: forward against host references with broadcasting,
// 0-d, 0-size and strided operands in every dtype; backward against finite
// differences and the masked host gradient (broadcast inputs go through
// sum_to); what backward saves; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::broadcast_index;
using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::non_contiguous;
using testing::random_tensor;
using testing::unravel;
using testing::values;

Tensor random_mask(Shape shape, uint64_t seed) {
  std::vector<bool> v;
  for (double x : values(random_tensor(shape, seed))) v.push_back(x > 0.3);
  return from_vector<bool>(v, {static_cast<int64_t>(v.size())}).reshape(shape);
}

// cond ? a : b elementwise over `shape`, each operand broadcast to it.
std::vector<double> where_reference(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  const std::vector<double> cv = values(cond), av = values(a), bv = values(b);
  std::vector<double> out;
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    const std::vector<int64_t> idx = unravel(i, shape);
    out.push_back(cv[broadcast_index(idx, cond.shape())] != 0 ? av[broadcast_index(idx, a.shape())]
                                                              : bv[broadcast_index(idx, b.shape())]);
  }
  return out;
}

// a, with value where the broadcast mask is set.
std::vector<double> masked_fill_reference(const Tensor& a, const Tensor& mask, double value) {
  const std::vector<double> av = values(a), mv = values(mask);
  std::vector<double> out;
  for (int64_t i = 0; i < a.numel(); ++i) {
    out.push_back(mv[broadcast_index(unravel(i, a.shape()), mask.shape())] != 0 ? value : av[i]);
  }
  return out;
}

// Selection copies values, so results must be equal bit for bit (infinities included).
void expect_exact(const Tensor& actual, const std::vector<double>& expected) { EXPECT_EQ(values(actual), expected); }

// The other engineer's sum_to may still be a kUnimplemented stub; broadcast
// backward cases need it.
bool sum_to_available() {
  return status_of([] { (void)sum_to(ones({2, 3}), {1, 3}); }).code() != absl::StatusCode::kUnimplemented;
}

struct WhereShapes { Shape cond, a, b, out; };

const std::vector<WhereShapes>& where_shapes() {
  static const std::vector<WhereShapes> kShapes = {
      {{3, 4}, {3, 4}, {3, 4}, {3, 4}},   {{3, 1}, {1, 4}, {4}, {3, 4}},  {{2, 3}, {}, {}, {2, 3}},
      {{}, {2, 3}, {2, 3}, {2, 3}},       {{2, 1, 3}, {4, 1}, {1}, {2, 4, 3}}, {{0, 3}, {3}, {1, 3}, {0, 3}},
      {{1}, {1}, {1}, {1}},               {{}, {}, {}, {}},               {{300, 1}, {300, 130}, {130}, {300, 130}},
      {{300, 130}, {300, 130}, {300, 130}, {300, 130}},   // parallel, contiguous fast path
  };
  return kShapes;
}

TEST(SelectTest, WhereMatchesHostReferenceWithBroadcasting) {
  for (const WhereShapes& s : where_shapes()) {
    SCOPED_TRACE(shape_str(s.cond) + " " + shape_str(s.a) + " " + shape_str(s.b));
    Tensor cond = random_mask(s.cond, 1), a = random_tensor(s.a, 2), b = random_tensor(s.b, 3);
    for (bool strided : {false, true}) {
      Tensor c = strided ? non_contiguous(cond) : cond;
      Tensor x = strided ? non_contiguous(a) : a;
      Tensor out = where(c, x, b);
      EXPECT_EQ(out.shape(), s.out);
      EXPECT_EQ(out.dtype(), kFloat32);
      expect_exact(out, where_reference(c, x, b, s.out));
    }
  }
  // A transposed operand.
  Tensor a = random_tensor({4, 3}, 4), b = random_tensor({3, 4}, 5), cond = random_mask({3, 4}, 6);
  expect_exact(where(cond, a.t(), b), where_reference(cond, a.t(), b, {3, 4}));
}

TEST(SelectTest, WhereCopiesEveryDtypeExactly) {
  for (DType dt : {kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor cond = random_mask({3, 1, 5}, 7);
    Tensor a = (random_tensor({4, 5}, 8) * 10.0).to(dt), b = (random_tensor({3, 4, 1}, 9) * 10.0).to(dt);
    Tensor out = where(cond, non_contiguous(a), b);
    EXPECT_EQ(out.dtype(), dt);
    expect_exact(out, where_reference(cond, a, b, {3, 4, 5}));
  }
}

TEST(SelectTest, WhereBackwardWithoutBroadcastNeedsNoSumTo) {
  Tensor cond = random_mask({3, 4}, 10);
  expect_gradients_match([cond](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); },
                         {random_tensor({3, 4}, 11), random_tensor({3, 4}, 12)});
  // Only a requires grad: g where cond, 0 elsewhere; b gets nothing. Small
  // and large (parallel), strided and contiguous gradients.
  for (const Shape& shape : {Shape{3, 4}, Shape{300, 130}}) {
    for (bool strided : {false, true}) {
      SCOPED_TRACE(shape_str(shape) + (strided ? " strided gradient" : ""));
      Tensor c = random_mask(shape, 10), a = random_tensor(shape, 13).requires_grad_(), b = random_tensor(shape, 14);
      Tensor g = random_tensor(shape, 15);
      where(c, a, b).backward(strided ? non_contiguous(g) : g);
      expect_exact(a.grad(), where_reference(c, g, zeros({}), shape));
      EXPECT_FALSE(b.grad().defined());
    }
  }
  // f16: masking copies the gradient exactly.
  Tensor h = random_tensor({3, 4}, 16, kFloat16).requires_grad_();
  Tensor gh = random_tensor({3, 4}, 17, kFloat16);
  where(cond, zeros({3, 4}, kFloat16), h).backward(gh);
  EXPECT_EQ(h.grad().dtype(), kFloat16);
  expect_exact(h.grad(), where_reference(cond, zeros({}), gh, {3, 4}));
}

TEST(SelectTest, WhereBackwardSumsBroadcastInputs) {
  if (!sum_to_available()) GTEST_SKIP() << "sum_to is still a kUnimplemented stub (reductions in progress)";
  for (const WhereShapes& s : where_shapes()) {
    if (s.a == s.out && s.b == s.out) continue;
    if (numel_of(s.out) > 1000) continue;   // finite differences stay small
    SCOPED_TRACE(shape_str(s.cond) + " " + shape_str(s.a) + " " + shape_str(s.b));
    Tensor cond = random_mask(s.cond, 20);
    expect_gradients_match([cond](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); },
                           {random_tensor(s.a, 21), random_tensor(s.b, 22)});
  }
  // Host reference: grad_a[j] = sum of g over the out elements that map to j where cond is set.
  Tensor cond = random_mask({3, 1}, 23);
  Tensor a = random_tensor({1, 4}, 24).requires_grad_(), b = random_tensor({}, 25).requires_grad_();
  Tensor g = random_tensor({3, 4}, 26);
  where(cond, a, b).backward(g);
  const std::vector<double> gv = values(g), cv = values(cond);
  std::vector<double> ga(4, 0.0);
  double gb = 0;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) (cv[i] != 0 ? ga[j] : gb) += gv[i * 4 + j];
  }
  expect_near(a.grad(), ga, 1e-5, 1e-5);
  expect_near(b.grad(), {gb}, 1e-5, 1e-5);
}

TEST(SelectTest, MaskedFillMatchesHostReference) {
  const std::vector<Shape> mask_shapes = {{3, 4}, {3, 1}, {4}, {}, {1, 1}};
  for (const Shape& ms : mask_shapes) {
    for (double value : {0.0, -double(INFINITY), 2.5}) {
      SCOPED_TRACE("mask " + shape_str(ms) + " value " + std::to_string(value));
      Tensor a = random_tensor({3, 4}, 30), mask = random_mask(ms, 31);
      for (bool strided : {false, true}) {
        Tensor x = strided ? non_contiguous(a) : a;
        Tensor m = strided ? non_contiguous(mask) : mask;
        Tensor out = masked_fill(x, m, value);
        EXPECT_EQ(out.shape(), a.shape());
        expect_exact(out, masked_fill_reference(x, m, value));
      }
    }
  }
  // The parallel paths: strided with a broadcast mask, and contiguous.
  Tensor big = random_tensor({300, 130}, 32), big_mask = random_mask({130}, 33), full_mask = random_mask({300, 130}, 36);
  expect_exact(masked_fill(big.t().contiguous().t(), big_mask, -1e9), masked_fill_reference(big, big_mask, -1e9));
  expect_exact(masked_fill(big, full_mask, -1e9), masked_fill_reference(big, full_mask, -1e9));
  // Dense rows with a broadcast mask (the attention mask's case), split mid-row between chunks.
  expect_exact(masked_fill(big, big_mask, -1e9), masked_fill_reference(big, big_mask, -1e9));
  expect_exact(masked_fill(zeros({2, 0, 3}), random_mask({0, 1}, 34), 1.0), {});
  expect_exact(masked_fill(random_tensor({}, 35), from_vector<bool>({true}).reshape({}), 7.0), {7.0});
}

TEST(SelectTest, MaskedFillEveryDtype) {
  Tensor mask = random_mask({2, 5}, 40);
  for (DType dt : {kFloat16, kBFloat16, kInt32, kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = (random_tensor({2, 5}, 41) * 10.0).to(dt);
    Tensor out = masked_fill(a, mask, -3.0);
    EXPECT_EQ(out.dtype(), dt);
    expect_exact(out, masked_fill_reference(a, mask, -3.0));
  }
  Tensor bools = random_mask({2, 5}, 42);
  expect_exact(masked_fill(bools, mask, 1.0), masked_fill_reference(bools, mask, 1.0));
  expect_exact(masked_fill(full({2}, 1.0, kFloat16), from_vector<bool>({true, false}), -INFINITY), {-INFINITY, 1.0});
}

TEST(SelectTest, MaskedFillBackwardZeroesMaskedGradient) {
  Tensor mask = random_mask({3, 1}, 50);
  expect_gradients_match([mask](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, 4.0); },
                         {random_tensor({3, 4}, 51)});
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = random_tensor({3, 4}, 52, dt).requires_grad_();
    Tensor g = random_tensor({3, 4}, 53, dt);
    masked_fill(a, mask, -INFINITY).backward(non_contiguous(g));
    EXPECT_EQ(a.grad().dtype(), dt);
    expect_exact(a.grad(), masked_fill_reference(g, mask, 0.0));
  }
}

TEST(SelectTest, BackwardRefusesAMaskModifiedInPlace) {
  Tensor mask = random_mask({4}, 60), cond = random_mask({4}, 61);
  Tensor a = random_tensor({4}, 62).requires_grad_();
  Tensor y = masked_fill(a, mask, 0.0), z = where(cond, a, zeros({4}));
  mask.fill_(1.0);
  cond.fill_(0.0);
  expect_error([&] { y.backward(ones({4})); }, absl::StatusCode::kFailedPrecondition, {"masked_fill", "modified"});
  expect_error([&] { z.backward(ones({4})); }, absl::StatusCode::kFailedPrecondition, {"where", "modified"});
}

TEST(SelectTest, RejectsBadInputsWithClearMessages) {
  Tensor f = zeros({3}), i = zeros({3}, kInt32), m = zeros({3}, kBool);
  expect_error([&] { (void)where(f, f, f); }, absl::StatusCode::kInvalidArgument, {"where", "condition", "bool", "[3]", "f32"});
  expect_error([&] { (void)where(m, f, i); }, absl::StatusCode::kInvalidArgument, {"where", "f32", "i32"});
  expect_error([&] { (void)where(m, f, zeros({4})); }, absl::StatusCode::kInvalidArgument, {"where", "[3]", "[4]"});
  expect_error([&] { (void)where(zeros({2}, kBool), f, f); }, absl::StatusCode::kInvalidArgument, {"where", "[2]", "[3]"});
  expect_error([&] { (void)where(Tensor(), f, f); }, absl::StatusCode::kInvalidArgument, {"where", "undefined"});
  expect_error([&] { (void)where(m, Tensor(), f); }, absl::StatusCode::kInvalidArgument, {"where", "undefined"});

  Tensor a = zeros({3, 4});
  expect_error([&] { (void)masked_fill(a, zeros({3, 4}), 1.0); }, absl::StatusCode::kInvalidArgument,
               {"masked_fill", "mask", "bool", "[3, 4]", "f32"});
  expect_error([&] { (void)masked_fill(a, zeros({3}, kBool), 1.0); }, absl::StatusCode::kInvalidArgument,
               {"masked_fill", "[3]", "[3, 4]"});
  expect_error([&] { (void)masked_fill(a, zeros({2, 3, 4}, kBool), 1.0); }, absl::StatusCode::kInvalidArgument,
               {"masked_fill", "[2, 3, 4]", "[3, 4]"});
  expect_error([&] { (void)masked_fill(Tensor(), m, 1.0); }, absl::StatusCode::kInvalidArgument, {"masked_fill", "undefined"});
  for (double bad : {0.5, 1e10, double(INFINITY), double(NAN)}) {
    expect_error([&] { (void)masked_fill(i, m, bad); }, absl::StatusCode::kInvalidArgument, {"masked_fill", "i32", "[3]"});
  }
  expect_error([&] { (void)masked_fill(zeros({2}, kInt64), zeros({2}, kBool), 1e19); },
               absl::StatusCode::kInvalidArgument, {"masked_fill", "1e+19", "i64", "[2]"});
}

}  // namespace
}  // namespace encore
