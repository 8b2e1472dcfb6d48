// eq, ne, lt, le, gt, ge: bool results against plain-loop references for
// every dtype, with broadcasting, strided operands, NaN, the scalar forms
// (the scalar rounded to the tensor's dtype first) and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::broadcast_index;
using testing::expect_error;
using testing::non_contiguous;
using testing::random_tensor;
using testing::unravel;
using testing::values;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

struct CompareCase {
  const char* name;
  Tensor (*tensor_op)(const Tensor&, const Tensor&);
  Tensor (*scalar_op)(const Tensor&, double);
  std::function<bool(double, double)> ref;
};

const std::vector<CompareCase>& cases() {
  static const std::vector<CompareCase> c = {
      {"eq", &eq, &eq, [](double a, double b) { return a == b; }},
      {"ne", &ne, &ne, [](double a, double b) { return a != b; }},
      {"lt", &lt, &lt, [](double a, double b) { return a < b; }},
      {"le", &le, &le, [](double a, double b) { return a <= b; }},
      {"gt", &gt, &gt, [](double a, double b) { return a > b; }},
      {"ge", &ge, &ge, [](double a, double b) { return a >= b; }},
  };
  return c;
}

std::vector<double> compare_ref(const Tensor& a, const Tensor& b, const Shape& shape,
                                const std::function<bool(double, double)>& f) {
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> out;
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    const std::vector<int64_t> idx = unravel(i, shape);
    out.push_back(f(av[broadcast_index(idx, a.shape())], bv[broadcast_index(idx, b.shape())]) ? 1.0 : 0.0);
  }
  return out;
}

// Small whole values, so equal pairs occur in every dtype.
Tensor small_values(Shape shape, uint64_t seed, DType dtype) {
  return clamp(mul(random_tensor(std::move(shape), seed), 2.0), -3, 3).to(kInt32).to(dtype);
}

TEST(CompareTest, TensorTensorMatchesReferenceInEveryDtype) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    const Tensor a = small_values({3, 4}, 1, dt), b = small_values({3, 4}, 2, dt), row = small_values({4}, 3, dt);
    for (const CompareCase& c : cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)));
      const Tensor out = c.tensor_op(a, b);
      EXPECT_EQ(out.dtype(), kBool);
      EXPECT_FALSE(out.requires_grad());
      EXPECT_EQ(values(out), compare_ref(a, b, {3, 4}, c.ref));
      EXPECT_EQ(values(c.tensor_op(a, row)), compare_ref(a, row, {3, 4}, c.ref));
      EXPECT_EQ(values(c.tensor_op(row.view({4, 1}), row)), compare_ref(row.view({4, 1}), row, {4, 4}, c.ref));
      EXPECT_EQ(values(c.tensor_op(non_contiguous(a), b)), compare_ref(a, b, {3, 4}, c.ref));
    }
  }
}

TEST(CompareTest, ScalarFormsRoundTheScalarToTheTensorsDtype) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64}) {
    const Tensor a = small_values({2, 5}, 4, dt);
    for (const CompareCase& c : cases()) {
      for (double s : {-1.0, 0.0, 2.0}) {
        SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)));
        EXPECT_EQ(values(c.scalar_op(a, s)), compare_ref(a, scalar_tensor(s), {2, 5}, c.ref));
      }
    }
  }
  // 0.1 rounds to bf16's 0.10009765625: a bf16 0.1 equals it, as a bf16 tensor compared with full(0.1) would.
  const Tensor b = full({1}, 0.1, kBFloat16);
  EXPECT_EQ(values(eq(b, 0.1)), std::vector<double>{1.0});
  EXPECT_EQ(values(eq(b.to(kFloat32), 0.1)), std::vector<double>{0.0});
}

TEST(CompareTest, NanIsUnequalToEverything) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor a = from_vector<float>({NAN, 1.f, NAN}, {3}), b = from_vector<float>({NAN, NAN, 0.f}, {3});
  for (const CompareCase& c : cases()) {
    EXPECT_EQ(values(c.tensor_op(a, b)), compare_ref(a, b, {3}, c.ref)) << c.name;
    EXPECT_EQ(values(c.scalar_op(a, nan)), compare_ref(a, scalar_tensor(nan), {3}, c.ref)) << c.name;
  }
}

TEST(CompareTest, ZeroSizeAndZeroDim) {
  EXPECT_EQ(lt(zeros({0, 3}), zeros({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(values(ge(scalar_tensor(2.0), scalar_tensor(1.0))), std::vector<double>{1.0});
}

TEST(CompareTest, Refusals) {
  const Tensor a = random_tensor({2, 3}, 1);
  expect_error([&] { eq(a, random_tensor({4}, 2)); }, kInvalid, {"eq", "[2, 3]", "[4]"});
  expect_error([&] { lt(a, a.to(kInt32)); }, kInvalid, {"lt", "f32", "i32"});
  expect_error([&] { gt(a.to(kInt32), 0.5); }, kInvalid, {"gt", "0.5", "i32"});
  expect_error([&] { le(Tensor(), 1.0); }, kInvalid, {"le"});
}

}  // namespace
}  // namespace encore
